package cluster

import (
	"context"
	"log/slog"
	"sync"
	"time"

	"github.com/shoal-run/shoal/internal/clock"
	"github.com/shoal-run/shoal/internal/store"
)

// StoreMembers is the cluster's membership read from the store: the live
// nodes (a heartbeat key, followed by a Live) with their records, and a
// change signal for the live set and the node records (a drain mark).
type StoreMembers struct {
	st   store.Store
	clk  clock.Clock
	log  *slog.Logger
	live *Live

	mu   sync.Mutex
	subs []chan struct{}
}

// NewStoreMembers returns the membership of the cluster on st; Run follows it.
func NewStoreMembers(st store.Store, clk clock.Clock, log *slog.Logger) *StoreMembers {
	return &StoreMembers{st: st, clk: clk, log: log, live: NewLive(st, clk, log)}
}

// Live returns the live set the membership follows.
func (m *StoreMembers) Live() *Live { return m.live }

// Nodes returns the ready and draining nodes with their records.
func (m *StoreMembers) Nodes(ctx context.Context) ([]Node, error) {
	nodes, err := List(ctx, m.st)
	if err != nil {
		return nil, err
	}
	out := nodes[:0]
	for _, n := range nodes {
		if n.State != StateDown {
			out = append(out, n)
		}
	}
	return out, nil
}

// Changed returns a channel that gets a value after each change of the
// live set or of a node record.
func (m *StoreMembers) Changed() <-chan struct{} {
	m.mu.Lock()
	defer m.mu.Unlock()
	ch := make(chan struct{}, 1)
	m.subs = append(m.subs, ch)
	return ch
}

func (m *StoreMembers) notify() {
	m.mu.Lock()
	defer m.mu.Unlock()
	for _, ch := range m.subs {
		select {
		case ch <- struct{}{}:
		default:
		}
	}
}

// Run follows the heartbeats and the node records until ctx ends.
func (m *StoreMembers) Run(ctx context.Context) {
	var wg sync.WaitGroup
	wg.Add(3)
	go func() { defer wg.Done(); m.live.Run(ctx) }()
	go func() {
		defer wg.Done()
		lived := m.live.Changed()
		for {
			select {
			case <-ctx.Done():
				return
			case <-lived:
				m.notify()
			}
		}
	}()
	go func() {
		defer wg.Done()
		for ctx.Err() == nil {
			if w, err := m.st.Watch(ctx, store.NodesPrefix); err == nil {
				for range w {
					m.notify()
				}
			}
			t := m.clk.NewTimer(time.Second)
			select {
			case <-ctx.Done():
				t.Stop()
			case <-t.C():
			}
		}
	}()
	wg.Wait()
}
