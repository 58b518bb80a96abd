package cluster

import (
	"context"
	"log/slog"
	"sort"
	"sync"
	"time"

	"github.com/shoal-run/shoal/internal/clock"
	"github.com/shoal-run/shoal/internal/store"
)

// Live follows the set of nodes whose heartbeat key exists: the nodes that
// placement may use and healing must not replace. It lists the heartbeat keys,
// then watches them, and lists again whenever the watch ends early.
type Live struct {
	st    store.Store
	clk   clock.Clock
	log   *slog.Logger
	mu    sync.Mutex
	nodes map[string]bool
	ready chan struct{} // closed after the first list
	subs  []chan struct{}
}

// NewLive returns a Live over st; Run fills it.
func NewLive(st store.Store, clk clock.Clock, log *slog.Logger) *Live {
	return &Live{st: st, clk: clk, log: log, nodes: map[string]bool{}, ready: make(chan struct{})}
}

// Nodes returns the names of the live nodes, sorted.
func (l *Live) Nodes() []string {
	l.mu.Lock()
	defer l.mu.Unlock()
	out := make([]string, 0, len(l.nodes))
	for n := range l.nodes {
		out = append(out, n)
	}
	sort.Strings(out)
	return out
}

// Ready is closed once the first list is in.
func (l *Live) Ready() <-chan struct{} { return l.ready }

// Changed returns a channel that gets a value after every change of the set
// (changes that come close together may be told once).
func (l *Live) Changed() <-chan struct{} {
	l.mu.Lock()
	defer l.mu.Unlock()
	ch := make(chan struct{}, 1)
	l.subs = append(l.subs, ch)
	return ch
}

// Run follows the heartbeat keys until ctx ends.
func (l *Live) Run(ctx context.Context) {
	first := true
	for ctx.Err() == nil {
		// Watch first, then list: no change falls between the two.
		ch, err := l.st.Watch(ctx, store.AlivePrefix)
		if err == nil {
			var kvs []store.KV
			if kvs, err = l.st.List(ctx, store.AlivePrefix); err == nil {
				set := map[string]bool{}
				for _, kv := range kvs {
					set[kv.Key[len(store.AlivePrefix):]] = true
				}
				l.replace(set)
				if first {
					close(l.ready)
					first = false
				}
				for ev := range ch {
					l.apply(ev)
				}
				continue
			}
		}
		l.log.Debug("watch of node heartbeats failed", "err", err)
		t := l.clk.NewTimer(time.Second)
		select {
		case <-ctx.Done():
			t.Stop()
		case <-t.C():
		}
	}
}

func (l *Live) apply(ev store.Event) {
	name := ev.KV.Key[len(store.AlivePrefix):]
	l.mu.Lock()
	was := l.nodes[name]
	is := ev.Type == store.EventPut
	if is {
		l.nodes[name] = true
	} else {
		delete(l.nodes, name)
	}
	l.mu.Unlock()
	if was != is {
		l.notify()
	}
}

func (l *Live) replace(set map[string]bool) {
	l.mu.Lock()
	same := len(set) == len(l.nodes)
	for n := range set {
		same = same && l.nodes[n]
	}
	l.nodes = set
	l.mu.Unlock()
	if !same {
		l.notify()
	}
}

func (l *Live) notify() {
	l.mu.Lock()
	defer l.mu.Unlock()
	for _, ch := range l.subs {
		select {
		case ch <- struct{}{}:
		default:
		}
	}
}
