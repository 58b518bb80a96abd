package serving

import (
	"context"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/shoal-run/shoal/internal/route"
	"github.com/shoal-run/shoal/internal/store"
)

// The ladder: a request wakes the app, the replica freezes after
// idle_timeout, a request thaws the same replica, and it stops after
// freeze_timeout frozen.
func TestLadderFreezeThawStop(t *testing.T) {
	h := newHarness(t)
	h.deploy(`idle_timeout = "30s"` + "\n" + `freeze_timeout = "10m"`)
	if n := h.rt.count(); n != 0 {
		t.Fatalf("min 0 app started %d containers before any request", n)
	}
	h.m.Activate("hello")
	h.wait("a replica is ready", func() bool { return len(h.replicas()[StateReady]) == 1 })
	id := h.replicas()[StateReady][0]
	if eps := h.r.endpoints("hello"); !slices.Equal(eps, []string{id}) {
		t.Fatalf("route after start: %v, want [%s]", eps, id)
	}
	h.advance(29 * time.Second)
	if got := h.replicas(); len(got[StateReady]) != 1 {
		t.Fatalf("froze before idle_timeout: %v", got)
	}
	h.advance(time.Second)
	h.wait("the idle replica freezes", func() bool { return len(h.replicas()[StateFrozen]) == 1 })
	if eps := h.r.endpoints("hello"); len(eps) != 0 {
		t.Fatalf("a frozen replica is still routed: %v", eps)
	}
	if c, _ := h.rt.get(id); c == nil || !c.frozen {
		t.Fatalf("replica %s is not frozen in the runtime", id)
	}
	h.m.Activate("hello")
	h.wait("the request thaws the replica", func() bool { return slices.Equal(h.replicas()[StateReady], []string{id}) })
	if c, _ := h.rt.get(id); c.frozen {
		t.Fatal("thawed replica still frozen in the runtime")
	}
	if eps := h.r.endpoints("hello"); !slices.Equal(eps, []string{id}) {
		t.Fatalf("route after thaw: %v", eps)
	}
	h.advance(30 * time.Second)
	h.wait("frozen again", func() bool { return len(h.replicas()[StateFrozen]) == 1 })
	h.advance(9 * time.Minute)
	if got := h.replicas(); len(got[StateFrozen]) != 1 {
		t.Fatalf("stopped before freeze_timeout: %v", got)
	}
	h.advance(time.Minute)
	h.wait("the frozen replica stops and is removed", func() bool { return len(h.replicas()) == 0 && h.rt.count() == 0 })
}

// min replicas stay ready however idle they are.
func TestLadderMinStaysReady(t *testing.T) {
	h := newHarness(t)
	h.deploy("min = 1\nidle_timeout = \"1s\"")
	h.wait("the min replica starts without a request", func() bool { return len(h.replicas()[StateReady]) == 1 })
	h.advance(time.Hour)
	if got := h.replicas(); len(got[StateReady]) != 1 || len(got) != 1 {
		t.Fatalf("min replica after an idle hour: %v", got)
	}
}

// A replica past max_lifetime is replaced: a fresh one becomes ready first,
// then the old one drains and goes.
func TestLadderMaxLifetime(t *testing.T) {
	h := newHarness(t)
	h.deploy("min = 1\nmax_lifetime = \"1h\"")
	h.wait("ready", func() bool { return len(h.replicas()[StateReady]) == 1 })
	old := h.replicas()[StateReady][0]
	h.advance(time.Hour)
	h.wait("the old replica is replaced", func() bool {
		r := h.replicas()
		return len(r) == 1 && len(r[StateReady]) == 1 && r[StateReady][0] != old
	})
	if _, err := h.rt.get(old); err == nil {
		t.Fatalf("old replica %s still has a container", old)
	}
}

// A crash marks the app failing with the reason and takes the replica out
// of the route; no replica starts before the back-off (100 ms after the
// first crash), and each crash in a row doubles it, also when the replicas
// in between became ready (a crash loop). The back-off runs from when the
// crashed replica became ready, so one that served for longer is replaced
// at once. A replica that stayed up for stableAfter starts the back-off
// over.
func TestLadderCrashBackoff(t *testing.T) {
	h := newHarness(t)
	h.deploy("min = 1")
	h.wait("ready", func() bool { return len(h.replicas()[StateReady]) == 1 })
	// crash ends the ready replica and waits until it is failed and gone.
	crash := func() {
		t.Helper()
		id := h.replicas()[StateReady][0]
		h.rt.exit(id, 3)
		h.wait("the crash is seen and the container removed", func() bool {
			r := h.replicas()
			return len(r[StateFailed]) == 1 && len(r) == 1 && h.rt.count() == 0
		})
	}
	// gap moves the clock 1 ms at a time until a new replica starts, waits
	// for it to be ready, and returns how long the clock moved.
	gap := func() time.Duration {
		t.Helper()
		var d time.Duration
		for h.rt.count() == 0 && len(h.replicas()) == 1 {
			if d > time.Minute {
				t.Fatal("no new replica a minute after the crash")
			}
			h.advance(time.Millisecond)
			d += time.Millisecond
		}
		h.wait("the new replica is ready", func() bool { return len(h.replicas()[StateReady]) == 1 })
		return d
	}

	crash()
	a, _ := h.m.Get(context.Background(), "hello")
	if a.State != "failing" || !strings.Contains(a.Error, "exited with code 3") {
		t.Fatalf("app after a crash: state %q error %q", a.State, a.Error)
	}
	if eps := h.r.endpoints("hello"); len(eps) != 0 {
		t.Fatalf("crashed replica still routed: %v", eps)
	}
	if d := gap(); d != 101*time.Millisecond {
		t.Fatalf("first restart %s after the crash, want the first moment after the 100ms back-off", d)
	}
	a, _ = h.m.Get(context.Background(), "hello")
	if a.State != "running" {
		t.Fatalf("app state after recovery: %q", a.State)
	}
	for _, want := range []time.Duration{200 * time.Millisecond, 400 * time.Millisecond} {
		crash()
		if d := gap(); d != want+time.Millisecond {
			t.Fatalf("restart %s after a crash in a row, want the first moment after %s", d, want)
		}
	}
	// replacedAtOnce ends the ready replica and waits, without moving the
	// clock, for another to be ready.
	replacedAtOnce := func(what string) {
		t.Helper()
		old := h.replicas()[StateReady][0]
		h.rt.exit(old, 137)
		h.wait(what, func() bool {
			r := h.replicas()[StateReady]
			return len(r) == 1 && r[0] != old
		})
	}
	// Ready for 1 s, longer than the fourth crash's 800 ms back-off: no
	// wait, though the crashes are still counted.
	h.advance(time.Second)
	replacedAtOnce("a replica that served for longer than its back-off is replaced without one")
	h.recorded()
	if n := len(h.ev.of("fail")); n != 4 {
		t.Fatalf("%d fail events after four crashes", n)
	}
	// Up for stableAfter: the next crash is not part of the loop, and the
	// one after it waits only the second step, 200 ms.
	h.advance(stableAfter)
	replacedAtOnce("a replica that was up for stableAfter is replaced without a back-off")
	crash()
	if d := gap(); d != 201*time.Millisecond {
		t.Fatalf("restart %s after a crash that follows a stable replica's, want 201ms", d)
	}
}

// Load above the target scales out (up to max); when it goes, the extra
// replicas freeze.
func TestLadderScaleOutAndIn(t *testing.T) {
	h := newHarness(t)
	h.deploy("max = 3\ntarget_concurrency = 10\nidle_timeout = \"1m\"")
	h.r.mu.Lock()
	h.r.load = route.Load{InFlight: 100}
	h.r.mu.Unlock()
	h.m.Activate("hello")
	for i := 0; i < 20 && len(h.replicas()[StateReady]) < 3; i++ {
		h.advance(tick)
	}
	h.wait("three replicas", func() bool { return len(h.replicas()[StateReady]) == 3 })
	h.r.mu.Lock()
	h.r.load = route.Load{}
	h.r.mu.Unlock()
	for i := 0; i < 100 && len(h.replicas()[StateFrozen]) < 3; i++ {
		h.advance(time.Second)
	}
	h.wait("all idle replicas frozen", func() bool { return len(h.replicas()[StateFrozen]) == 3 })
}

// A ready replica that another node records in the store is not routed
// by its container address, which is local to that node's host: other
// nodes reach it through its node's proxy (internal/routes).
func TestRemoteReplicaNotRoutedByAddress(t *testing.T) {
	h := newHarness(t)
	h.deploy("min = 1")
	h.wait("ready", func() bool { return len(h.replicas()[StateReady]) == 1 })
	local := h.replicas()[StateReady][0]
	rec := `{"id":"hello-remote1","app":"hello","revision":1,"node":"n2","state":"ready","addr":"10.9.9.9:8080"}`
	key := store.ReplicaKey("hello", "hello-remote1")
	if _, err := h.m.o.Store.Put(context.Background(), key, []byte(rec)); err != nil {
		t.Fatal(err)
	}
	// A change of the local replica's state publishes the route again.
	h.m.Activate("hello")
	h.advance(time.Second)
	if eps := h.r.endpoints("hello"); !slices.Equal(eps, []string{local}) {
		t.Fatalf("routed %v; want the local replica only", eps)
	}
}

// Frozen replicas above the host's memory budget are stopped, the least
// recently used first. Each fake replica holds 1 MiB.
func TestFrozenMemoryBudget(t *testing.T) {
	h := newHarnessFrozen(t, 2<<20+1)
	h.deploy("max = 3\ntarget_concurrency = 1\nidle_timeout = \"1m\"\nfreeze_timeout = \"1h\"")
	h.r.mu.Lock()
	h.r.load = route.Load{InFlight: 3}
	h.r.mu.Unlock()
	h.m.Activate("hello")
	for i := 0; i < 20 && len(h.replicas()[StateReady]) < 3; i++ {
		h.advance(tick)
	}
	h.wait("three replicas", func() bool { return len(h.replicas()[StateReady]) == 3 })
	h.r.mu.Lock()
	h.r.load = route.Load{}
	h.r.mu.Unlock()
	for i := 0; i < 100 && len(h.replicas()[StateReady]) > 0; i++ {
		h.advance(time.Second)
	}
	h.wait("a 1 MiB replica over the 2 MiB budget stops", func() bool {
		r := h.replicas()
		return len(r[StateFrozen]) == 2 && len(r[StateReady]) == 0 && h.rt.count() == 2
	})
}

// A replica frozen for idleness stays frozen although the autoscaler's
// window still remembers the traffic that woke it.
func TestIdleFreezeDoesNotOscillate(t *testing.T) {
	h := newHarness(t)
	h.deploy(`idle_timeout = "2s"`)
	h.r.mu.Lock()
	h.r.load = route.Load{InFlight: 1, LastRequest: h.clock.Now()}
	h.r.mu.Unlock()
	h.m.Activate("hello")
	h.wait("ready", func() bool { return len(h.replicas()[StateReady]) == 1 })
	h.advance(tick)
	h.r.mu.Lock()
	h.r.load = route.Load{LastRequest: h.clock.Now()}
	h.r.mu.Unlock()
	h.advance(2 * time.Second)
	h.wait("frozen", func() bool { return len(h.replicas()[StateFrozen]) == 1 })
	for i := 0; i < 30; i++ {
		h.advance(tick)
		if r := h.replicas(); len(r[StateFrozen]) != 1 {
			t.Fatalf("%v after %d ticks frozen: the idle replica was woken without a request", r, i+1)
		}
	}
}

// A crash loop whose next start is a second or more away says so in the
// route (Failing, with the crash's reason, and RetryAt, the end of the
// back-off), so that the proxy answers at once rather than hold requests;
// a shorter back-off does not, nor does the route once a start is under
// way.
func TestCrashLoopRouteSaysFailing(t *testing.T) {
	h := newHarness(t)
	h.deploy("min = 1")
	h.wait("ready", func() bool { return len(h.replicas()[StateReady]) == 1 })
	for i, backoff := range []time.Duration{100, 200, 400, 800, 1600} {
		backoff *= time.Millisecond
		id := h.replicas()[StateReady][0]
		h.rt.exit(id, 3)
		h.wait("the crash is seen and the container removed", func() bool {
			r := h.replicas()
			return len(r[StateFailed]) == 1 && len(r) == 1 && h.rt.count() == 0
		})
		if backoff < time.Second {
			if rt := h.r.route("hello"); rt.Failing != "" {
				t.Fatalf("crash %d, back-off %s: the route says failing: %q", i+1, backoff, rt.Failing)
			}
		} else {
			h.wait("the route says failing", func() bool { return h.r.route("hello").Failing != "" })
			rt := h.r.route("hello")
			if !strings.Contains(rt.Failing, "exited with code 3") || !rt.RetryAt.Equal(h.clock.Now().Add(backoff)) {
				t.Fatalf("crash %d, back-off %s: route failing %q until %v, want the reason until %v", i+1, backoff, rt.Failing, rt.RetryAt, h.clock.Now().Add(backoff))
			}
		}
		for h.rt.count() == 0 && len(h.replicas()) == 1 {
			h.advance(50 * time.Millisecond)
		}
		h.wait("the next replica is ready", func() bool { return len(h.replicas()[StateReady]) == 1 })
		if rt := h.r.route("hello"); rt.Failing != "" {
			t.Fatalf("route of a ready replica says failing: %q", rt.Failing)
		}
	}
}
