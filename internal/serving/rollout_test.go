package serving

import (
	"context"
	"encoding/json"
	"errors"
	"maps"
	"slices"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/shoal-run/shoal/internal/api/types"
	"github.com/shoal-run/shoal/internal/errdefs"
	"github.com/shoal-run/shoal/internal/store"
)

// env is the [env] table that makes a manifest a revision of its own.
func env(v string) string { return "[env]\nV = \"" + v + "\"" }

// app returns the app's status.
func (h *harness) app() types.App {
	h.t.Helper()
	a, err := h.m.Get(context.Background(), "hello")
	if err != nil {
		h.t.Fatal(err)
	}
	return a
}

// byRevision returns the ids of the app's replicas of revision rev in
// state.
func (h *harness) byRevision(rev int, state State) []string {
	var ids []string
	for _, r := range h.app().Replicas {
		if r.Revision == rev && State(r.State) == state {
			ids = append(ids, r.ID)
		}
	}
	sort.Strings(ids)
	return ids
}

// envOf is the value of V that replica id's container was started with.
func (h *harness) envOf(id string) string {
	h.t.Helper()
	c, err := h.rt.get(id)
	if err != nil {
		h.t.Fatalf("replica %s: %v", id, err)
	}
	for _, e := range c.spec.Env {
		if v, ok := strings.CutPrefix(e, "V="); ok {
			return v
		}
	}
	return ""
}

func sorted(ids []string) []string {
	out := slices.Clone(ids)
	sort.Strings(out)
	return out
}

// A new revision surges: its replicas (as many as the app has) start and
// become ready while the old ones keep the traffic, then the route moves
// over in one change, and the old replicas drain and freeze. Every route
// set on the way has three endpoints of one revision.
func TestRolloutSurge(t *testing.T) {
	h := newHarness(t)
	h.deploy("min = 3", env("1"))
	// Routes are published once the controller's lock is released: the
	// one with all three is out before the count of routes is taken.
	h.wait("three ready and routed", func() bool {
		ready := h.byRevision(1, StateReady)
		return len(ready) == 3 && slices.Equal(sorted(h.r.endpoints("hello")), ready)
	})
	old := h.byRevision(1, StateReady)
	_, mark := h.r.since(0)
	// Revision 2's replicas pass no health check until the test lets
	// them, so the rollout is seen in progress however slow the host is.
	h.held.Store(true)
	h.deploy("min = 3", env("2"), "[health]\nhttp = \"/held\"")
	a := h.app()
	if a.Revision != 2 || a.Rollout == nil || a.Rollout.State != types.RolloutProgressing || a.Rollout.From != 1 {
		t.Fatalf("after the deploy: revision %d, rollout %+v", a.Revision, a.Rollout)
	}
	h.wait("three replicas of revision 2 start", func() bool { return len(h.byRevision(2, StateStarting)) == 3 })
	if eps := sorted(h.r.endpoints("hello")); !slices.Equal(eps, old) {
		t.Fatalf("route while revision 2 starts: %v, want the old replicas %v", eps, old)
	}
	h.held.Store(false)
	h.advanceUntil("the rollout is done", 10*time.Millisecond, func() bool {
		ro := h.app().Rollout
		return ro != nil && ro.State == types.RolloutDone
	})
	fresh := h.byRevision(2, StateReady)
	if len(fresh) != 3 {
		t.Fatalf("revision 2 ready replicas: %v", fresh)
	}
	for _, id := range fresh {
		if v := h.envOf(id); v != "2" {
			t.Fatalf("replica %s of revision 2 started with V=%q", id, v)
		}
	}
	h.wait("the old replicas freeze", func() bool { return slices.Equal(h.byRevision(1, StateFrozen), old) })
	routes, _ := h.r.since(mark)
	for i, rt := range routes {
		revs := map[int]bool{}
		for _, e := range rt.Endpoints {
			revs[e.Revision] = true
		}
		if len(rt.Endpoints) != 3 || len(revs) != 1 {
			t.Fatalf("route %d of %d during the rollout: %+v", i+1, len(routes), rt.Endpoints)
		}
	}
	rt := h.r.route("hello")
	if eps := sorted(h.r.endpoints("hello")); !slices.Equal(eps, fresh) || !maps.Equal(rt.Weights, map[int]int{2: 100}) {
		t.Fatalf("route after the rollout: %v weights %v, want %v {2:100}", eps, rt.Weights, fresh)
	}
	a = h.app()
	if a.Rollout.Ready != 3 || a.Rollout.Want != 3 || !slices.Equal(a.Traffic, []types.TrafficTarget{{Revision: 2, Percent: 100}}) {
		t.Fatalf("app after the rollout: rollout %+v traffic %v", a.Rollout, a.Traffic)
	}
	// Events are recorded in the background, in order: the last rollout
	// event is revision 2's, once it is there.
	h.wait("the rollout event", func() bool {
		evs := h.ev.of("rollout")
		return slices.ContainsFunc(evs, func(e types.Event) bool { return strings.Contains(e.Reason, "revision 2 rolled out") })
	})
	if evs := h.ev.of("rollout"); !strings.Contains(evs[len(evs)-1].Reason, "revision 2 rolled out: 3/3 ready") {
		t.Fatalf("rollout events: %+v", evs)
	}
	// The old revision's frozen replicas are not thawed for the new one.
	h.m.Scale(context.Background(), "hello", types.ScaleRequest{Min: ptr(4)})
	h.wait("four ready", func() bool { return len(h.byRevision(2, StateReady)) == 4 })
	if got := h.byRevision(1, StateFrozen); !slices.Equal(got, old) {
		t.Fatalf("old frozen replicas after scale-out of the new revision: %v, want %v", got, old)
	}
}

func ptr[T any](v T) *T { return &v }

// A revision whose replicas never pass their health check is rolled back
// after `failures` failed starts: the app's revision goes back, the old
// replicas never left the route, and the event says why.
func TestRolloutAutoRollback(t *testing.T) {
	h := newHarness(t)
	h.deploy("min = 2", env("1"))
	h.wait("two ready", func() bool { return len(h.byRevision(1, StateReady)) == 2 })
	old := h.byRevision(1, StateReady)
	h.deploy("min = 2", env("2"), "[health]\nhttp = \"/fail\"\nstart_timeout = \"1s\"")
	h.advanceUntil("the rollback", 200*time.Millisecond, func() bool {
		ro := h.app().Rollout
		return ro != nil && ro.State == types.RolloutRolledBack
	})
	a := h.app()
	if a.Revision != 1 || a.Rollout.Revision != 2 || a.Rollout.From != 1 || !strings.Contains(a.Rollout.Reason, "failed before it was ready") {
		t.Fatalf("after the rollback: revision %d rollout %+v", a.Revision, a.Rollout)
	}
	if eps := sorted(h.r.endpoints("hello")); !slices.Equal(eps, old) || !slices.Equal(h.byRevision(1, StateReady), old) {
		t.Fatalf("route after the rollback: %v, want %v", eps, old)
	}
	h.wait("the rollback event", func() bool { return len(h.ev.of("rollback")) > 0 })
	evs := h.ev.of("rollback")
	if len(evs) != 1 || !strings.Contains(evs[0].Reason, "revision 2 rolled back to revision 1") || !strings.Contains(evs[0].Reason, "not ready after 1s") {
		t.Fatalf("rollback events: %+v", evs)
	}
	h.advanceUntil("revision 2's replicas are gone", 200*time.Millisecond, func() bool { return h.rt.count() == 2 })
	if a := h.app(); a.State != "running" {
		t.Fatalf("app state after the rollback: %q (%s)", a.State, a.Error)
	}
	// The stored record says the same, for a restarted daemon.
	h.m.app("hello").flush()
	var rec appRecord
	kv, err := h.m.o.Store.Get(context.Background(), store.AppKey("hello"))
	if err != nil || json.Unmarshal(kv.Value, &rec) != nil || rec.Revision != 1 || rec.Rollout.State != types.RolloutRolledBack {
		t.Fatalf("stored app record: %+v %v", rec, err)
	}
}

// While only the revision rolling out fails and the old one serves, the
// app is running: the rollout carries the failures and the last one.
func TestRolloutFailuresKeepAppRunning(t *testing.T) {
	h := newHarness(t)
	h.deploy("min = 2", env("1"))
	h.wait("two ready", func() bool { return len(h.byRevision(1, StateReady)) == 2 })
	h.deploy("min = 2", env("2"), "[health]\nhttp = \"/fail\"\nstart_timeout = \"1s\"\nfailures = 100")
	h.advanceUntil("a replica of revision 2 fails", 200*time.Millisecond, func() bool {
		ro := h.app().Rollout
		return ro != nil && ro.Failures > 0
	})
	a := h.app()
	ro := a.Rollout
	if a.State != "running" || ro.State != types.RolloutProgressing || ro.Revision != 2 || !strings.Contains(ro.Reason, "not ready after 1s") {
		t.Fatalf("app %q (%s), rollout %+v", a.State, a.Error, ro)
	}
	if a.Error == "" {
		t.Fatalf("app has no error while its rollout fails: %+v", a)
	}
	// With nothing else to serve (a new app's first revision), it is
	// failing.
	h = newHarness(t)
	h.deploy("min = 1", "[health]\nhttp = \"/fail\"\nstart_timeout = \"1s\"\nfailures = 100")
	h.advanceUntil("a replica of revision 1 fails", 200*time.Millisecond, func() bool {
		ro := h.app().Rollout
		return ro != nil && ro.Failures > 0
	})
	if a := h.app(); a.State != "failing" || !strings.Contains(a.Error, "not ready after 1s") {
		t.Fatalf("new app whose replicas fail: %q (%s), rollout %+v", a.State, a.Error, a.Rollout)
	}
}

// A rollback thaws the previous revision's frozen replicas (the same ones)
// and moves the route to them at once, without a reconcile round; the
// revision left behind drains and freezes.
func TestRollbackThawsFrozen(t *testing.T) {
	h := newHarness(t)
	h.deploy("min = 2", env("1"))
	h.wait("two ready", func() bool { return len(h.byRevision(1, StateReady)) == 2 })
	old := h.byRevision(1, StateReady)
	h.deploy("min = 2", env("2"))
	h.wait("revision 1 frozen", func() bool { return slices.Equal(h.byRevision(1, StateFrozen), old) })
	fresh := h.byRevision(2, StateReady)
	a, err := h.m.Rollback(context.Background(), "hello", types.RollbackRequest{})
	if err != nil {
		t.Fatal(err)
	}
	if a.Revision != 1 || a.Rollout.From != 2 || !slices.Equal(a.Traffic, []types.TrafficTarget{{Revision: 1, Percent: 100}}) {
		t.Fatalf("after the rollback: revision %d rollout %+v traffic %v", a.Revision, a.Rollout, a.Traffic)
	}
	if eps := sorted(h.r.endpoints("hello")); !slices.Equal(eps, old) {
		t.Fatalf("route when Rollback returns: %v, want the thawed %v", eps, old)
	}
	for _, id := range old {
		if c, _ := h.rt.get(id); c == nil || c.frozen {
			t.Fatalf("replica %s is still frozen", id)
		}
	}
	h.wait("revision 2 freezes", func() bool { return slices.Equal(h.byRevision(2, StateFrozen), fresh) })
	h.wait("the rollback event", func() bool { return len(h.ev.of("rollback")) > 0 })
	if evs := h.ev.of("rollback"); len(evs) != 1 || !strings.Contains(evs[0].Reason, "2 replicas thawed, 0 started") {
		t.Fatalf("rollback events: %+v", evs)
	}
	// And forward again: --to 2 thaws revision 2.
	if _, err := h.m.Rollback(context.Background(), "hello", types.RollbackRequest{To: 2}); err != nil {
		t.Fatal(err)
	}
	if eps := sorted(h.r.endpoints("hello")); !slices.Equal(eps, fresh) {
		t.Fatalf("route after rollback --to 2: %v, want %v", eps, fresh)
	}
	for _, bad := range []types.RollbackRequest{{To: 9}} {
		if _, err := h.m.Rollback(context.Background(), "hello", bad); !errdefs.IsInvalid(err) || !strings.Contains(err.Error(), "no revision 9") {
			t.Fatalf("rollback to %d: %v", bad.To, err)
		}
	}
}

// The old revision's replicas stay frozen for rollback_grace, then stop; a
// rollback after that cold-starts replicas with that revision's config.
func TestRollbackGraceExpiry(t *testing.T) {
	h := newHarness(t)
	h.deploy("min = 1\nrollback_grace = \"5m\"", env("1"))
	h.wait("ready", func() bool { return len(h.byRevision(1, StateReady)) == 1 })
	old := h.byRevision(1, StateReady)
	h.deploy("min = 1\nrollback_grace = \"5m\"", env("2"))
	h.wait("revision 1 frozen", func() bool { return slices.Equal(h.byRevision(1, StateFrozen), old) })
	h.advance(5*time.Minute - time.Second)
	if got := h.byRevision(1, StateFrozen); !slices.Equal(got, old) {
		t.Fatalf("stopped before rollback_grace: %v", h.replicas())
	}
	h.advance(time.Second)
	h.wait("the frozen replica stops", func() bool {
		_, err := h.rt.get(old[0])
		return len(h.byRevision(1, StateFrozen)) == 0 && err != nil
	})
	h.wait("the stop event", func() bool { return len(h.ev.of("stop")) > 0 })
	if evs := h.ev.of("stop"); len(evs) == 0 || !strings.Contains(evs[len(evs)-1].Reason, "rollback_grace") {
		t.Fatalf("stop events: %+v", evs)
	}
	if _, err := h.m.Rollback(context.Background(), "hello", types.RollbackRequest{To: 1}); err != nil {
		t.Fatal(err)
	}
	h.wait("a revision 1 replica is ready", func() bool { return len(h.byRevision(1, StateReady)) == 1 })
	id := h.byRevision(1, StateReady)[0]
	if id == old[0] || h.envOf(id) != "1" {
		t.Fatalf("cold-started replica %s (V=%q), old %s", id, h.envOf(id), old[0])
	}
}

// A traffic split keeps each revision's replicas at its share of the count
// (at least one each), routes with the weights and is stored; bad splits
// are refused naming the field.
func TestTrafficSplit(t *testing.T) {
	h := newHarness(t)
	h.deploy("min = 10", env("1"))
	h.wait("ten ready", func() bool { return len(h.byRevision(1, StateReady)) == 10 })
	h.deploy("min = 10", env("2"))
	h.wait("the rollout is done", func() bool { return h.app().Rollout.State == types.RolloutDone })
	a, err := h.m.SetTraffic(context.Background(), "hello", types.TrafficRequest{
		Traffic: []types.TrafficTarget{{Revision: 1, Percent: 90}, {Revision: 2, Percent: 10}}, Sticky: true})
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(a.Traffic, []types.TrafficTarget{{Revision: 1, Percent: 90}, {Revision: 2, Percent: 10}}) || !a.Sticky {
		t.Fatalf("traffic: %v sticky %v", a.Traffic, a.Sticky)
	}
	h.wait("9 + 1 ready", func() bool {
		return len(h.byRevision(1, StateReady)) == 9 && len(h.byRevision(2, StateReady)) == 1
	})
	rt := h.r.route("hello")
	if !maps.Equal(rt.Weights, map[int]int{1: 90, 2: 10}) || !rt.Sticky || len(rt.Endpoints) < 10 {
		t.Fatalf("route: weights %v sticky %v, %d endpoints", rt.Weights, rt.Sticky, len(rt.Endpoints))
	}
	// With one replica wanted, each revision keeps one.
	h.m.Scale(context.Background(), "hello", types.ScaleRequest{Min: ptr(1)})
	h.advanceUntil("1 + 1 ready", 10*time.Second, func() bool {
		return len(h.byRevision(1, StateReady)) == 1 && len(h.byRevision(2, StateReady)) == 1
	})
	// Two revisions that take traffic run two replicas: the autoscaler's
	// count says so too, and does not go 2 → 1 → 2 while nothing changes.
	// The round that froze the last idle replica may also have decided the
	// count (3 → 2), and its event may not be recorded yet: the count of
	// events is taken once it is.
	h.recorded()
	settled := len(h.ev.of("scale"))
	h.advance(time.Minute)
	if evs := h.ev.of("scale"); len(evs) != settled {
		t.Fatalf("scale events with the split steady: %v", evs[settled:])
	}
	var rec appRecord
	kv, err := h.m.o.Store.Get(context.Background(), store.AppKey("hello"))
	if err != nil || json.Unmarshal(kv.Value, &rec) != nil || len(rec.Traffic) != 2 || !rec.Sticky {
		t.Fatalf("stored app record: traffic %v sticky %v (%v)", rec.Traffic, rec.Sticky, err)
	}
	for _, c := range []struct {
		ts    []types.TrafficTarget
		field string
	}{
		{[]types.TrafficTarget{{Revision: 1, Percent: 90}, {Revision: 2, Percent: 20}}, "traffic"},
		{[]types.TrafficTarget{{Revision: 1, Percent: 90}, {Revision: 7, Percent: 10}}, "traffic[1].revision"},
		{[]types.TrafficTarget{{Revision: 1, Percent: 50}, {Revision: 1, Percent: 50}}, "traffic[1].revision"},
		{[]types.TrafficTarget{{Revision: 1, Percent: 101}}, "traffic[0].percent"},
		{nil, "traffic"},
	} {
		_, err := h.m.SetTraffic(context.Background(), "hello", types.TrafficRequest{Traffic: c.ts})
		var fe *errdefs.FieldError
		if !errdefs.IsInvalid(err) || !errors.As(err, &fe) || fe.Field != c.field {
			t.Fatalf("traffic %v: %v, want an error naming %s", c.ts, err, c.field)
		}
	}
	// A plain deploy moves all traffic to the new revision once it is ready.
	h.deploy("min = 1", env("3"))
	h.wait("revision 3 takes all traffic", func() bool {
		a := h.app()
		return a.Rollout.State == types.RolloutDone && slices.Equal(a.Traffic, []types.TrafficTarget{{Revision: 3, Percent: 100}})
	})
}

func TestSplit(t *testing.T) {
	for _, c := range []struct {
		n, floor int
		w, want  map[int]int
	}{
		{10, 1, map[int]int{1: 90, 2: 10}, map[int]int{1: 9, 2: 1}},
		{1, 1, map[int]int{1: 90, 2: 10}, map[int]int{1: 1, 2: 1}},
		{0, 0, map[int]int{1: 90, 2: 10}, map[int]int{1: 0, 2: 0}},
		{3, 1, map[int]int{1: 50, 2: 50}, map[int]int{1: 1, 2: 2}},
		{4, 1, map[int]int{1: 90, 2: 10}, map[int]int{1: 3, 2: 1}},
		{2, 1, map[int]int{1: 98, 2: 1, 3: 1}, map[int]int{1: 1, 2: 1, 3: 1}},
		{5, 0, map[int]int{4: 100}, map[int]int{4: 5}},
	} {
		if got := split(c.n, c.w, c.floor); !maps.Equal(got, c.want) {
			t.Errorf("split(%d, %v, %d) = %v, want %v", c.n, c.w, c.floor, got, c.want)
		}
	}
}

// restart closes the manager and starts another on the same store, runtime
// and directory, as a restarted daemon would.
func (h *harness) restart() {
	h.t.Helper()
	h.m.Close()
	o := h.m.o
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
}

// A traffic split and the rollout's outcome survive a daemon restart: the
// new manager routes with the stored weights and keeps the revisions'
// replicas apart.
func TestTrafficSurvivesRestart(t *testing.T) {
	h := newHarness(t)
	h.deploy("min = 2", env("1"))
	h.wait("two ready", func() bool { return len(h.byRevision(1, StateReady)) == 2 })
	h.deploy("min = 2", env("2"))
	h.wait("the rollout is done", func() bool { return h.app().Rollout.State == types.RolloutDone })
	want := []types.TrafficTarget{{Revision: 1, Percent: 50}, {Revision: 2, Percent: 50}}
	if _, err := h.m.SetTraffic(context.Background(), "hello", types.TrafficRequest{Traffic: want, Sticky: true}); err != nil {
		t.Fatal(err)
	}
	h.wait("1 + 1 ready", func() bool { return len(h.byRevision(1, StateReady)) == 1 && len(h.byRevision(2, StateReady)) == 1 })
	h.restart()
	h.wait("both adopted and routed", func() bool {
		rt := h.r.route("hello")
		return len(rt.Endpoints) == 2 && rt.Sticky && maps.Equal(rt.Weights, map[int]int{1: 50, 2: 50})
	})
	a := h.app()
	if !slices.Equal(a.Traffic, want) || !a.Sticky || a.Revision != 2 || a.Rollout.State != types.RolloutDone {
		t.Fatalf("after a restart: revision %d traffic %v sticky %v rollout %+v", a.Revision, a.Traffic, a.Sticky, a.Rollout)
	}
}

// A daemon killed while a replica started may leave its record without the
// PID (saved before the container ran): the next daemon takes the PID from
// the runtime when it adopts the replica.
func TestAdoptTakesPidFromRuntime(t *testing.T) {
	h := newHarness(t)
	h.deploy("min = 1", env("1"))
	h.wait("one ready", func() bool { return len(h.byRevision(1, StateReady)) == 1 })
	r := h.app().Replicas[0]
	if r.Pid == 0 {
		t.Fatalf("replica without a PID: %+v", r)
	}
	h.m.Close()
	ctx := context.Background()
	kv, err := h.m.o.Store.Get(ctx, store.ReplicaKey("hello", r.ID))
	if err != nil {
		t.Fatal(err)
	}
	var rec replicaRecord
	if err := json.Unmarshal(kv.Value, &rec); err != nil {
		t.Fatal(err)
	}
	rec.Pid = 0
	b, _ := json.Marshal(rec)
	if _, err := h.m.o.Store.Put(ctx, kv.Key, b); err != nil {
		t.Fatal(err)
	}
	h.restart()
	h.wait("adopted", func() bool { return len(h.byRevision(1, StateReady)) == 1 })
	if got := h.app().Replicas[0]; got.ID != r.ID || got.Pid != r.Pid {
		t.Fatalf("adopted replica %s with PID %d, want %s with %d", got.ID, got.Pid, r.ID, r.Pid)
	}
}

// Replicas kept frozen for a rollback count in the host's frozen-memory
// budget: over it, they stop like any frozen replica.
func TestRollbackGraceWithinBudget(t *testing.T) {
	h := newHarnessFrozen(t, 2<<20+1)
	h.deploy("min = 3", env("1"))
	h.wait("three ready", func() bool { return len(h.byRevision(1, StateReady)) == 3 })
	h.deploy("min = 3", env("2"))
	h.wait("two of revision 1 kept frozen, one stopped over the 2 MiB budget", func() bool {
		return len(h.byRevision(1, StateFrozen)) == 2 && len(h.byRevision(2, StateReady)) == 3 && h.rt.count() == 5
	})
}
