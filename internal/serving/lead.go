package serving

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"github.com/shoal-run/shoal/internal/cluster"
	"github.com/shoal-run/shoal/internal/errdefs"
	"github.com/shoal-run/shoal/internal/store"
)

// Cluster is what serving needs of the cluster it is a node of: whether
// this node leads, and which nodes are live. Options.Cluster nil: a single
// host, whose Manager always runs its apps.
type Cluster interface {
	// Term returns the current leadership while this node leads, nil
	// while it follows.
	Term() cluster.Term
	// Nodes returns the live nodes (ready or draining) with their
	// capacity.
	Nodes(ctx context.Context) ([]NodeInfo, error)
	// Changed gets a value after a change of leadership or of the live
	// node set (changes close together may be told once).
	Changed() <-chan struct{}
}

// NodeInfo is a live node of the cluster as placement sees it.
type NodeInfo struct {
	Name         string
	CPUs         int
	Memory       int64 // bytes
	FrozenMemory int64 // bytes frozen replicas may hold there (0: this host's budget)
	Draining     bool  // a member that takes no new replica
}

// lead is one run of the app controllers: on a single host the daemon's
// whole life, in a cluster one leadership of this node. The controllers of
// a lead write their records through it (fenced by the term in a cluster)
// and stop with its context.
type lead struct {
	term    cluster.Term // nil on a single host
	write   cluster.Term // term, each write bounded by cluster.WriteBound
	st      store.Store
	ctx     context.Context
	cancel  context.CancelFunc
	wg      sync.WaitGroup // the controllers' goroutines and the starts under way
	deposed atomic.Bool    // a write was refused: the term is over
	kick    func()         // tells the Manager of a refused write
}

func (m *Manager) newLead(t cluster.Term) *lead {
	l := &lead{term: t, st: m.o.Store, kick: func() { poke(m.kick) }}
	if t != nil {
		l.write = cluster.Bounded(t, m.clock)
	}
	l.ctx, l.cancel = context.WithCancel(m.ctx)
	return l
}

// put writes key, through the term in a cluster.
func (l *lead) put(ctx context.Context, key string, val []byte) error {
	if l.term == nil {
		_, err := l.st.Put(ctx, key, val)
		return err
	}
	_, err := l.write.Put(ctx, key, val)
	return l.refused(err)
}

// del deletes key (a key already gone is no error), through the term in a
// cluster.
func (l *lead) del(ctx context.Context, key string) error {
	var err error
	if l.term == nil {
		err = l.st.Delete(ctx, key)
	} else {
		err = l.write.Delete(ctx, key)
	}
	if errdefs.IsNotFound(err) {
		return nil
	}
	return l.refused(err)
}

// refused notes a write refused because the term is over.
func (l *lead) refused(err error) error {
	if errors.Is(err, cluster.ErrDeposed) && !l.deposed.Swap(true) {
		l.kick()
	}
	return err
}

// errNotLeader answers the API of a node that follows: its apps are the
// leader's to run.
func (m *Manager) errNotLeader() error {
	return fmt.Errorf("node %s does not lead the cluster: apps are deployed and run through the leader (shoal node ls): %w",
		m.o.Node, errdefs.ErrUnavailable)
}

// noApp is the error for app name when it is not one of the Manager's:
// not found, or, while a node of a cluster follows, errNotLeader.
func (m *Manager) noApp(name string) error {
	if m.o.Cluster != nil {
		if _, err := m.leading(); err != nil {
			return err
		}
	}
	return fmt.Errorf("app %q: %w", name, errdefs.ErrNotFound)
}

// leading returns the current lead, or errNotLeader.
func (m *Manager) leading() (*lead, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.lead == nil {
		return nil, m.errNotLeader()
	}
	return m.lead, nil
}

// follow runs the controllers while this node leads the cluster: it takes
// the lead on election, steps down when the term ends or a write of its
// is refused, and heals the apps when the live node set changes.
func (m *Manager) follow() {
	defer m.wg.Done()
	changed := m.o.Cluster.Changed()
	var deposed cluster.Term // a term whose write was refused: never led again
	retry := m.clock.NewTimer(time.Hour)
	retry.Stop()
	defer retry.Stop()
	for {
		t := m.o.Cluster.Term()
		m.mu.Lock()
		cur := m.lead
		m.mu.Unlock()
		if cur != nil && (cur.term != t || cur.deposed.Load()) {
			if cur.deposed.Load() {
				deposed = cur.term
			}
			m.stepDown(cur)
			cur = nil
		}
		if cur == nil && t != nil && t != deposed {
			if err := m.takeLead(t); err != nil {
				m.log.Error("serving: take the lead; trying again in a second", "err", err)
				retry.Reset(time.Second)
			}
		}
		m.heal()
		select {
		case <-m.ctx.Done():
			return
		case <-changed:
		case <-m.kick:
		case <-retry.C():
		}
	}
}

// takeLead loads every app from the store, adopts each replica through
// the node its record names and starts the controllers.
func (m *Manager) takeLead(t cluster.Term) error {
	l := m.newLead(t)
	m.disp.reset()
	if err := m.refreshLive(); err != nil {
		l.cancel()
		return err
	}
	m.log.Info("serving: leading: running the apps of the cluster", "node", m.o.Node)
	if err := m.load(l.ctx, l); err != nil {
		m.stepDown(l)
		return err
	}
	// The API takes writes once every app is loaded.
	m.mu.Lock()
	m.lead = l
	m.mu.Unlock()
	return nil
}

// stepDown stops the controllers of lead l and waits for them. Replicas
// keep running: the next leader adopts them.
func (m *Manager) stepDown(l *lead) {
	m.mu.Lock()
	if m.lead == l {
		m.lead = nil
	}
	ctls := m.apps
	m.apps = map[string]*appCtl{}
	m.mu.Unlock()
	l.cancel()
	for _, ctl := range ctls {
		ctl.close()
	}
	l.wg.Wait()
	m.log.Info("serving: not leading: the apps' controllers stopped, their replicas run on", "node", m.o.Node)
}

// load reads every app of the store and runs it under lead l.
func (m *Manager) load(ctx context.Context, l *lead) error {
	kvs, err := m.o.Store.List(ctx, store.AppsPrefix)
	if err != nil {
		return fmt.Errorf("serving: list apps: %w", err)
	}
	for _, kv := range kvs {
		var rec appRecord
		if err := json.Unmarshal(kv.Value, &rec); err != nil {
			m.log.Error("serving: unreadable app record; skipped", "key", kv.Key, "err", err)
			continue
		}
		ctl := newAppCtl(m, rec, l)
		if err := ctl.drv.adopt(ctx); err != nil {
			m.log.Error("serving: adopt replicas", "app", rec.Config.Name, "err", err)
		}
		// The proxy knows the app from now on, even with no ready replica:
		// its first request wakes it.
		ctl.mu.Lock()
		ctl.publish()
		ctl.unlock()
		m.mu.Lock()
		m.apps[rec.Config.Name] = ctl
		m.mu.Unlock()
		m.run(ctl)
		if l.term != nil {
			ctl.notify() // a new leader replaces the lost replicas at once
		}
		if rec.Deleting {
			go m.finishRemove(ctl)
		}
	}
	return nil
}
