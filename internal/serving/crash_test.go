package serving

import (
	"context"
	"encoding/json"
	"errors"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/shoal-run/shoal/internal/api/types"
	"github.com/shoal-run/shoal/internal/localnode"
	"github.com/shoal-run/shoal/internal/route"
	"github.com/shoal-run/shoal/internal/runtime"
	"github.com/shoal-run/shoal/internal/store"
)

// errKilled answers what a killed daemon still tries.
var errKilled = errors.New("the daemon was killed")

// crash is a daemon killed at one instant: the moment a route it is
// watching for goes out. From then on the store, runtime and router the
// daemon was given refuse or drop whatever it still tries, as if its
// process were gone, while what it left (the store's contents, the
// containers, the proxy's routes and load) stays for the next daemon.
// Its store stalls the writes of a key until released, so that the test,
// not the scheduler, orders the store's writer and the route.
type crash struct {
	st   store.Store // the store under the daemon's
	dead chan struct{}
	once sync.Once

	mu      sync.Mutex
	stalled string        // a key whose writes wait
	resume  chan struct{} // closed: they go on
	when    func(route.Route) bool
	then    func() // run when it fires, before the daemon is dead
	fired   bool
}

// newCrashHarness is a harness whose daemon a crash kills.
func newCrashHarness(t *testing.T) (*harness, *crash) {
	c := &crash{dead: make(chan struct{})}
	h := newHarnessOpts(t, func(o *testOpts) {
		c.st = o.Store
		o.Store = crashStore{o.Store, c}
		o.Runtime = crashRuntime{o.Runtime, c}
		o.Router = crashRouter{o.Router, c}
	})
	// Before the Manager's Close (cleanups run last first): a write
	// still stalled ends.
	t.Cleanup(c.kill)
	return h, c
}

func (c *crash) kill() { c.once.Do(func() { close(c.dead) }) }

func (c *crash) killed() bool {
	select {
	case <-c.dead:
		return true
	default:
		return false
	}
}

// stall has the writes of key wait until release.
func (c *crash) stall(key string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.stalled, c.resume = key, make(chan struct{})
}

func (c *crash) release() {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.resume != nil {
		close(c.resume)
		c.stalled, c.resume = "", nil
	}
}

// at kills the daemon right after the first route that when accepts has
// gone out; then runs first, seeing the world as the next daemon will.
func (c *crash) at(when func(route.Route) bool, then func()) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.when, c.then = when, then
}

func (c *crash) hasFired() bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.fired
}

// write waits while key is stalled, and refuses once the daemon is dead.
func (c *crash) write(key string) error {
	c.mu.Lock()
	var wait chan struct{}
	if key == c.stalled {
		wait = c.resume
	}
	c.mu.Unlock()
	if wait != nil {
		select {
		case <-wait:
		case <-c.dead:
		}
	}
	if c.killed() {
		return errKilled
	}
	return nil
}

type crashStore struct {
	store.Store
	c *crash
}

func (s crashStore) Put(ctx context.Context, key string, val []byte, opts ...store.PutOption) (int64, error) {
	if err := s.c.write(key); err != nil {
		return 0, err
	}
	return s.Store.Put(ctx, key, val, opts...)
}

func (s crashStore) Delete(ctx context.Context, key string) error {
	if err := s.c.write(key); err != nil {
		return err
	}
	return s.Store.Delete(ctx, key)
}

func (s crashStore) CompareAndSwap(ctx context.Context, key string, rev int64, val []byte, opts ...store.PutOption) (int64, error) {
	if err := s.c.write(key); err != nil {
		return 0, err
	}
	return s.Store.CompareAndSwap(ctx, key, rev, val, opts...)
}

// crashRuntime refuses what would change a container once the daemon is
// dead.
type crashRuntime struct {
	localnode.Runtime // the local node runs replicas on it; serving, merge hooks
	c                 *crash
}

func (r crashRuntime) alive() error {
	if r.c.killed() {
		return errKilled
	}
	return nil
}

func (r crashRuntime) Run(ctx context.Context, s runtime.Spec) (*runtime.Container, error) {
	if err := r.alive(); err != nil {
		return nil, err
	}
	return r.Runtime.Run(ctx, s)
}

func (r crashRuntime) Stop(ctx context.Context, id string, grace time.Duration) (runtime.ExitStatus, error) {
	if err := r.alive(); err != nil {
		return runtime.ExitStatus{}, err
	}
	return r.Runtime.Stop(ctx, id, grace)
}

func (r crashRuntime) Delete(ctx context.Context, id string) error {
	if err := r.alive(); err != nil {
		return err
	}
	return r.Runtime.Delete(ctx, id)
}

func (r crashRuntime) Freeze(id string) error {
	if err := r.alive(); err != nil {
		return err
	}
	return r.Runtime.Freeze(id)
}

func (r crashRuntime) Thaw(id string) error {
	if err := r.alive(); err != nil {
		return err
	}
	return r.Runtime.Thaw(id)
}

func (r crashRuntime) UpdateCPU(id string, cpus float64) error {
	if err := r.alive(); err != nil {
		return err
	}
	return r.Runtime.UpdateCPU(id, cpus)
}

// crashRouter is the proxy, which outlives the daemon: it drops the
// routes of a dead daemon, and kills it when the route it watches for
// goes out.
type crashRouter struct {
	Router
	c *crash
}

func (r crashRouter) SetRoute(rt route.Route) {
	c := r.c
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.killed() {
		return
	}
	r.Router.SetRoute(rt)
	if c.when != nil && c.when(rt) {
		c.fired = true
		if c.then != nil {
			c.then()
		}
		c.kill()
	}
}

func (r crashRouter) RemoveRoute(app string) {
	if !r.c.killed() {
		r.Router.RemoveRoute(app)
	}
}

// revive starts a daemon on what the killed one left: its store, the
// containers and the proxy. It returns the count of routes set before.
func (h *harness) revive(c *crash) int {
	h.t.Helper()
	if !c.hasFired() {
		h.t.Fatal("revive before the crash")
	}
	h.m.Close()
	_, mark := h.r.since(0)
	o := h.m.o
	o.Store, o.Router = c.st, h.r
	h.lrt = h.rt
	o.Registerer = prometheus.NewRegistry()
	m, err := New(h.withLocal(o))
	if err != nil {
		h.t.Fatal(err)
	}
	if err := m.Start(context.Background()); err != nil {
		h.t.Fatal(err)
	}
	h.m = m
	h.t.Cleanup(m.Close)
	return mark
}

// written waits until the app's controller has nothing left to write.
func (h *harness) written() {
	h.t.Helper()
	ctl := h.m.app("hello")
	h.wait("the records written", func() bool {
		ctl.recMu.Lock() // no write under way
		defer ctl.recMu.Unlock()
		ctl.mu.Lock()
		defer ctl.unlock()
		return !ctl.appDirty && len(ctl.unsaved) == 0 && ctl.holds == ctl.stored && len(ctl.held) == 0
	})
}

// getJSON reads key of st into v.
func getJSON(t *testing.T, st store.Store, key string, v any) {
	t.Helper()
	kv, err := st.Get(context.Background(), key)
	if err != nil {
		t.Errorf("%s: %v", key, err)
		return
	}
	if err := json.Unmarshal(kv.Value, v); err != nil {
		t.Errorf("%s: %v", key, err)
	}
}

// noneRouted fails the test if a route set from the mark-th on holds one
// of the endpoints that bad accepts.
func (h *harness) noneRouted(mark int, what string, bad func(route.Endpoint) bool) {
	h.t.Helper()
	routes, _ := h.r.since(mark)
	for i, rt := range routes {
		if j := slices.IndexFunc(rt.Endpoints, bad); j >= 0 {
			h.t.Fatalf("route %d of %d after the restart holds %s %s: %+v", i+1, len(routes), what, rt.Endpoints[j].ID, rt.Endpoints)
		}
	}
}

// running reports whether replica id's container runs.
func (h *harness) running(id string) bool {
	c, err := h.rt.get(id)
	if err != nil {
		return false
	}
	select {
	case <-c.done:
		return false
	default:
		return true
	}
}

// A rollout's traffic switch is in the store before the route without
// the old revision goes out. The store's writer is stalled on the app
// record when the switch is decided; the daemon is killed the moment that
// route goes out. The next daemon finds revision 2 taking the traffic,
// and never routes revision 1 again: its replicas, adopted outside the
// route, freeze.
func TestRolloutSwitchStoredBeforeRoute(t *testing.T) {
	h, c := newCrashHarness(t)
	h.deploy("min = 2", env("1"))
	h.wait("two ready and routed", func() bool {
		ready := h.byRevision(1, StateReady)
		return len(ready) == 2 && slices.Equal(sorted(h.r.endpoints("hello")), ready)
	})
	old := h.byRevision(1, StateReady)
	h.held.Store(true) // revision 2 passes no check until the stall is set
	h.deploy("min = 2", env("2"), "[health]\nhttp = \"/held\"")
	h.wait("two of revision 2 start", func() bool { return len(h.byRevision(2, StateStarting)) == 2 })

	h.written()
	c.stall(store.AppKey("hello"))
	var stored appRecord
	c.at(func(rt route.Route) bool { return rt.Weights[1] == 0 && len(rt.Endpoints) > 0 },
		func() { getJSON(t, c.st, store.AppKey("hello"), &stored) })
	h.held.Store(false)
	h.advanceUntil("the switch to revision 2", 10*time.Millisecond, func() bool {
		ro := h.app().Rollout
		return ro != nil && ro.Revision == 2 && ro.State == types.RolloutDone
	})
	h.advance(tick) // the round that switched is over, its lock released
	c.release()
	h.wait("the route of revision 2 goes out", c.hasFired)
	if got := trafficString(stored.Traffic); got != "2=100" {
		t.Errorf("when the route of revision 2 alone went out, the store held traffic %q, rollout %+v; want 2=100", got, stored.Rollout)
	}

	mark := h.revive(c)
	h.advanceUntil("revision 1 frozen, revision 2 ready, after the restart", tick, func() bool {
		return slices.Equal(h.byRevision(1, StateFrozen), old) && len(h.byRevision(2, StateReady)) == 2
	})
	h.noneRouted(mark, "a replica of revision 1", func(e route.Endpoint) bool { return e.Revision == 1 })
	if rt := h.r.route("hello"); len(rt.Endpoints) != 2 || rt.Weights[2] != 100 {
		t.Fatalf("route after the restart: %+v", rt)
	}
}

// A replica's draining mark is in the store before the route without it
// goes out. A replica past max_lifetime, with a request in flight, drains
// once its replacement is ready; the store's writer is stalled on its
// record, and the daemon is killed the moment the route without it goes
// out. The next daemon finds it draining: it is never routed again, and
// drains again, stopped only once its request is done.
func TestDrainStoredBeforeRoute(t *testing.T) {
	h, c := newCrashHarness(t)
	h.deploy("min = 1\nmax_lifetime = \"1h\"\ndrain_timeout = \"1h\"")
	h.wait("ready and routed", func() bool {
		ready := h.replicas()[StateReady]
		return len(ready) == 1 && slices.Equal(h.r.endpoints("hello"), ready)
	})
	old := h.replicas()[StateReady][0]
	now := h.clock.Now()
	h.r.setLoad(route.Load{InFlight: 1, LastRequest: now,
		Endpoints: map[string]route.EndpointLoad{old: {InFlight: 1, LastRequest: now}}})

	h.written()
	c.stall(store.ReplicaKey("hello", old))
	var stored replicaRecord
	c.at(func(rt route.Route) bool {
		return len(rt.Endpoints) > 0 && !slices.ContainsFunc(rt.Endpoints, func(e route.Endpoint) bool { return e.ID == old })
	}, func() { getJSON(t, c.st, store.ReplicaKey("hello", old), &stored) })
	h.advance(time.Hour)
	h.advanceUntil("the old replica drains", tick, func() bool { return slices.Contains(h.replicas()[StateDraining], old) })
	h.advance(tick) // the round that drained it is over, its lock released
	c.release()
	h.wait("the route without the old replica goes out", c.hasFired)
	if stored.State != StateDraining {
		t.Errorf("when the route without %s went out, its record in the store was %q; want %q", old, stored.State, StateDraining)
	}

	mark := h.revive(c)
	h.advanceUntil("the old replica drains again", tick, func() bool {
		return slices.Contains(h.replicas()[StateDraining], old) && h.r.waits(old) > 0
	})
	h.advance(tick)
	if !h.running(old) {
		t.Fatalf("the old replica was stopped with its request in flight")
	}
	h.r.setLoad(route.Load{LastRequest: h.clock.Now()})
	h.advanceUntil("the drained replica is gone, its replacement routed", tick, func() bool {
		r := h.replicas()
		return !h.running(old) && len(r) == 1 && len(r[StateReady]) == 1 && slices.Equal(h.r.endpoints("hello"), r[StateReady])
	})
	h.noneRouted(mark, "the drained replica", func(e route.Endpoint) bool { return e.ID == old })
}

// A replica recorded as draining when the daemon stopped drains again
// under the next one: it is neither routed nor killed with a request in
// flight, and stops once the request is done.
func TestAdoptDrainingDrainsAgain(t *testing.T) {
	h := newHarness(t)
	h.deploy("min = 1\ndrain_timeout = \"1h\"")
	h.wait("ready", func() bool { return len(h.replicas()[StateReady]) == 1 })
	id := h.replicas()[StateReady][0]
	now := h.clock.Now()
	h.r.setLoad(route.Load{InFlight: 1, LastRequest: now,
		Endpoints: map[string]route.EndpointLoad{id: {InFlight: 1, LastRequest: now}}})
	h.m.Close()
	ctx := context.Background()
	key := store.ReplicaKey("hello", id)
	var rec replicaRecord
	getJSON(t, h.m.o.Store, key, &rec)
	rec.State = StateDraining
	b, _ := json.Marshal(rec)
	if _, err := h.m.o.Store.Put(ctx, key, b); err != nil {
		t.Fatal(err)
	}
	_, mark := h.r.since(0)
	h.restart()
	h.wait("the draining replica drains, or is stopped", func() bool { return h.r.waits(id) > 0 || !h.running(id) })
	if !h.running(id) {
		t.Fatalf("the draining replica was stopped with its request in flight")
	}
	h.advanceUntil("a replacement is ready", tick, func() bool { return len(h.replicas()[StateReady]) == 1 })
	if !h.running(id) || !slices.Contains(h.replicas()[StateDraining], id) {
		t.Fatalf("the draining replica while its request is in flight: running %v, replicas %v", h.running(id), h.replicas())
	}
	h.r.setLoad(route.Load{LastRequest: h.clock.Now()})
	h.advanceUntil("the drained replica is gone", tick, func() bool {
		r := h.replicas()
		return !h.running(id) && len(r) == 1 && len(r[StateReady]) == 1
	})
	h.noneRouted(mark, "the draining replica", func(e route.Endpoint) bool { return e.ID == id })
}
