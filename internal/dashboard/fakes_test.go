package dashboard

import (
	"context"
	"sync"
	"time"

	"github.com/shoal-run/shoal/internal/api/types"
	"github.com/shoal-run/shoal/internal/clock"
	"github.com/shoal-run/shoal/internal/route"
)

// fakeDaemon stands in for the serving manager, the proxy's counters, the
// event log and the job queue, all in memory.
type fakeDaemon struct {
	mu      sync.Mutex
	apps    []types.App
	loads   map[string]route.Load
	events  []types.Event
	watch   chan types.Event
	stats   JobStats
	tenants []Tenant
}

func newFakeDaemon() *fakeDaemon {
	return &fakeDaemon{loads: map[string]route.Load{}, watch: make(chan types.Event, 16)}
}

func (f *fakeDaemon) List(context.Context) ([]types.App, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	return append([]types.App(nil), f.apps...), nil
}

func (f *fakeDaemon) Load(app string) route.Load {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.loads[app]
}

func (f *fakeDaemon) Stats() JobStats {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.stats
}

func (f *fakeDaemon) Tenants() []Tenant {
	f.mu.Lock()
	defer f.mu.Unlock()
	return append([]Tenant(nil), f.tenants...)
}

func (f *fakeDaemon) set(apps []types.App, loads map[string]route.Load) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.apps, f.loads = apps, loads
}

// fakeEvents is the event log: List returns what it holds, Watch streams
// what a test sends on watch, from seq above after.
type fakeEvents struct{ f *fakeDaemon }

func (e fakeEvents) List(_ context.Context, after int64, app string) ([]types.Event, error) {
	e.f.mu.Lock()
	defer e.f.mu.Unlock()
	var out []types.Event
	for _, ev := range e.f.events {
		if ev.Seq > after && (app == "" || ev.App == app) {
			out = append(out, ev)
		}
	}
	return out, nil
}

func (e fakeEvents) Watch(ctx context.Context, after int64, app string) (<-chan types.Event, error) {
	out := make(chan types.Event)
	go func() {
		defer close(out)
		for {
			select {
			case ev := <-e.f.watch:
				if ev.Seq > after {
					out <- ev
				}
			case <-ctx.Done():
				return
			}
		}
	}()
	return out, nil
}

var t0 = time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)

func newTestDashboard(f *fakeDaemon, fc *clock.Fake) *Dashboard {
	return New(Options{Apps: f, Loads: f, Events: fakeEvents{f}, Jobs: f, Token: "sesame", Clock: fc, History: 5})
}

func replica(id, state string, cpu float64) types.Replica {
	return types.Replica{ID: id, Revision: 1, State: state, CPU: cpu}
}
