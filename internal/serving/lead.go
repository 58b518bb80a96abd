package serving

import (
	"context"
	"encoding/json"
	"fmt"
	"time"

	"github.com/shoal-run/shoal/internal/cluster"
	"github.com/shoal-run/shoal/internal/errdefs"
	"github.com/shoal-run/shoal/internal/group"
	"github.com/shoal-run/shoal/internal/store"
)

// Cluster is what serving needs of the cluster it is a node of: its live
// nodes and a signal when they change. Options.Cluster nil: a single host,
// whose Manager always runs its apps. In a cluster the Manager is a
// cluster.LeaderWork: the cluster's Hub establishes it under each term of
// this node (it then runs the apps) and revokes it when the term ends.
type Cluster interface {
	// Nodes returns the live nodes (ready or draining) with their records.
	Nodes(ctx context.Context) ([]cluster.Node, error)
	// Changed returns a channel that gets a value after a change of the
	// live node set or of a node record (changes close together may be
	// told once).
	Changed() <-chan struct{}
}

// lead is one run of the app controllers: on a single host the daemon's
// whole life, in a cluster one term of this node. The controllers of a
// lead write their records through it (through the term in a cluster:
// fenced, bounded, a refused write ends the term) and stop with its
// context.
type lead struct {
	term   cluster.Term // nil on a single host
	st     store.Store
	ctx    context.Context
	cancel context.CancelFunc
	wg     group.Group // the controllers' goroutines and the starts under way
}

// newLead returns a lead under ctx, writing through term t (nil: the store).
func (m *Manager) newLead(ctx context.Context, t cluster.Term) *lead {
	l := &lead{term: t, st: m.o.Store}
	l.ctx, l.cancel = context.WithCancel(ctx)
	return l
}

// put writes key, through the term in a cluster.
func (l *lead) put(ctx context.Context, key string, val []byte) error {
	if l.term == nil {
		_, err := l.st.Put(ctx, key, val)
		return err
	}
	_, err := l.term.Put(ctx, key, val)
	return err
}

// del deletes key (a key already gone is no error), through the term in a
// cluster.
func (l *lead) del(ctx context.Context, key string) error {
	var err error
	if l.term == nil {
		err = l.st.Delete(ctx, key)
	} else {
		err = l.term.Delete(ctx, key)
	}
	if errdefs.IsNotFound(err) {
		return nil
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

// leading is the leader work of one term: its goroutine, and how to stop
// it.
type leading struct {
	cancel context.CancelFunc
	done   chan struct{}
}

// Establish runs the apps of the cluster under term t
// (cluster.LeaderWork): it loads them (again each second until that
// succeeds), then heals them on each change of the live nodes, until the
// term ends or the Manager closes.
func (m *Manager) Establish(t *cluster.Lead) {
	ctx, cancel := context.WithCancel(t.Context())
	stop := context.AfterFunc(m.ctx, cancel)
	w := &leading{cancel: cancel, done: make(chan struct{})}
	m.mu.Lock()
	m.leader = w
	m.mu.Unlock()
	go func() {
		defer close(w.done)
		defer stop()
		m.leadTerm(ctx, t)
	}()
}

// Revoke stops the controllers of the term and waits for them
// (cluster.LeaderWork). Replicas keep running: the next leader adopts
// them.
func (m *Manager) Revoke() {
	m.mu.Lock()
	w := m.leader
	m.leader = nil
	m.mu.Unlock()
	if w != nil {
		w.cancel()
		<-w.done
	}
}

// leadTerm takes the lead under term t, heals the apps when the live node
// set changes, and steps down when ctx ends.
func (m *Manager) leadTerm(ctx context.Context, t cluster.Term) {
	retry := m.clock.NewTimer(time.Hour)
	retry.Stop()
	defer retry.Stop()
	var l *lead
	for {
		if l == nil {
			var err error
			if l, err = m.takeLead(ctx, t); err != nil {
				m.log.Error("serving: take the lead; trying again in a second", "err", err)
				retry.Reset(time.Second)
			}
		}
		m.heal()
		select {
		case <-ctx.Done():
			if l != nil {
				m.stepDown(l)
			}
			return
		case <-m.changed:
		case <-retry.C():
		}
	}
}

// takeLead loads every app from the store, adopts each replica through
// the node its record names and starts the controllers.
func (m *Manager) takeLead(ctx context.Context, t cluster.Term) (*lead, error) {
	l := m.newLead(ctx, t)
	m.disp.Reset()
	if err := m.refreshLive(); err != nil {
		l.cancel()
		return nil, err
	}
	m.log.Info("serving: leading: running the apps of the cluster", "node", m.o.Node)
	if err := m.load(l.ctx, l); err != nil {
		m.stepDown(l)
		return nil, err
	}
	// The API takes writes once every app is loaded.
	m.mu.Lock()
	m.lead = l
	m.mu.Unlock()
	return l, nil
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
		if err := ctl.adopt(ctx); err != nil {
			m.log.Error("serving: adopt replicas", "app", rec.Config.Name, "err", err)
		}
		// The proxy knows the app from now on, even with no ready replica:
		// its first request wakes it.
		ctl.mu.Lock()
		ctl.publish()
		ctl.unlock()
		m.mu.Lock()
		m.addApp(ctl)
		m.mu.Unlock()
		m.run(ctl)
		if l.term != nil {
			ctl.notify() // a new leader replaces the lost replicas at once
		}
		if rec.Deleting {
			go m.finishRemove(ctl)
		}
	}
	// The frozen replicas adopted count in the budget at what they hold.
	m.enforceFrozenBudget()
	return nil
}
