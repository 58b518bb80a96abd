package serving

import (
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/shoal-run/shoal/internal/route"
)

// A replica throttled in most of its CPU periods gets its quota raised
// live, doubling up to max_cpu and no further; with little throttling it
// gives half the extra back, once it has shown no demand for
// autoscale's hold (10 s), and once idle for the stable window it goes
// back to the base quota. Each change is a cpu event with its reason.
func TestLadderVerticalCPU(t *testing.T) {
	h := newHarness(t)
	h.deploy("min = 1", "[resources]\ncpu = 0.5\nmax_cpu = 2")
	h.wait("ready", func() bool { return len(h.replicas()[StateReady]) == 1 })
	id := h.replicas()[StateReady][0]
	// The first rounds take the counters' baseline.
	h.advance(tick)
	h.advance(tick)
	if q, ups := h.rt.cpu(id); q != 0.5 || len(ups) != 0 {
		t.Fatalf("before any work: quota %g, updates %v; want 0.5 and none", q, ups)
	}

	// step does work on the replica each tick until its quota changes
	// (within 15 s: a quota is lowered 10 s after the last demand).
	step := func(what string, periods, throttled uint64) float64 {
		t.Helper()
		before, _ := h.rt.cpu(id)
		for i := 0; i < 150; i++ {
			h.rt.work(id, periods, throttled)
			h.advance(tick)
			if q, _ := h.rt.cpu(id); q != before {
				return q
			}
		}
		t.Fatalf("%s: quota still %g after 150 ticks", what, before)
		return 0
	}
	if q := step("throttled 90%", 10, 9); q != 1 {
		t.Fatalf("throttled 90%% at 0.5 cpu: quota %g, want 1", q)
	}
	if q := step("throttled 90%", 10, 9); q != 2 {
		t.Fatalf("throttled 90%% at 1 cpu: quota %g, want 2 (max_cpu)", q)
	}
	// At max_cpu more throttling changes nothing.
	for i := 0; i < 5; i++ {
		h.rt.work(id, 10, 9)
		h.advance(tick)
	}
	if q, ups := h.rt.cpu(id); q != 2 || !slices.Equal(ups, []float64{1, 2}) {
		t.Fatalf("throttled at max_cpu: quota %g, updates %v; want 2 after [1 2]", q, ups)
	}
	a, _ := h.m.Get(h.m.ctx, "hello")
	if a.Replicas[0].CPU != 2 {
		t.Fatalf("status shows cpu %g, want 2", a.Replicas[0].CPU)
	}

	// Busy but hardly throttled: half the extra goes back.
	if q := step("throttled 0%", 10, 0); q != 1.25 {
		t.Fatalf("unthrottled at 2 cpu: quota %g, want 1.25", q)
	}
	// Idle for the stable window (10 s): back to the base quota.
	var q float64
	for i := 0; i < 20 && q != 0.5; i++ {
		h.advance(time.Second)
		q, _ = h.rt.cpu(id)
	}
	if _, ups := h.rt.cpu(id); !slices.Equal(ups, []float64{1, 2, 1.25, 0.5}) {
		t.Fatalf("quota updates %v, want [1 2 1.25 0.5]", ups)
	}

	want := []struct{ dir, from, to, why string }{
		{"up", "0.50", "1.00", "throttled in 90% of 10 periods"},
		{"up", "1.00", "2.00", "throttled in 90% of 10 periods"},
		{"down", "2.00", "1.25", "throttled in 0% of 10 periods"},
		{"down", "1.25", "0.50", "idle"},
	}
	h.wait("four cpu events", func() bool { return len(h.ev.of("cpu")) == len(want) })
	for i, e := range h.ev.of("cpu") {
		w := want[i]
		head := fmt.Sprintf("CPU quota %s from %s to %s cores", w.dir, w.from, w.to)
		if e.Replica != id || !strings.HasPrefix(e.Reason, head) || !strings.Contains(e.Reason, w.why) {
			t.Errorf("cpu event %d: %s %q; want %s, %q with %q", i, e.Replica, e.Reason, id, head, w.why)
		}
	}
}

// A replica with requests waiting on it that uses all of its quota gets
// more although it is never throttled (a quota just above its bursts,
// or, on a busy host, a CPU shared with its neighbours): the quota
// followed throttling alone before, and stayed at 0.5 here while 60
// requests waited. Once they are answered, it goes back down after the
// hold.
func TestLadderCPURaisedOnDemand(t *testing.T) {
	h := newHarness(t)
	h.deploy("min = 1\nmax = 1", "[resources]\ncpu = 0.5\nmax_cpu = 2")
	h.wait("ready", func() bool { return len(h.replicas()[StateReady]) == 1 })
	id := h.replicas()[StateReady][0]
	h.advance(tick)
	h.advance(tick)

	busy := func(inFlight int) {
		now := h.clock.Now()
		h.r.setLoad(route.Load{InFlight: inFlight, LastRequest: now, Endpoints: map[string]route.EndpointLoad{id: {InFlight: inFlight, LastRequest: now}}})
	}
	busy(60)
	for i := 0; i < 50; i++ {
		q, _ := h.rt.cpu(id)
		// A period of work each tick, using all of the quota, never
		// throttled.
		h.rt.work(id, 1, 0)
		h.rt.use(id, time.Duration(q*float64(tick)))
		h.advance(tick)
		if q, _ := h.rt.cpu(id); q == 2 {
			break
		}
	}
	if q, ups := h.rt.cpu(id); q != 2 || !slices.Equal(ups, []float64{1, 2}) {
		t.Fatalf("60 requests in flight at the whole quota, never throttled: quota %g, updates %v; want 2 after [1 2]", q, ups)
	}
	h.wait("two cpu events", func() bool { return len(h.ev.of("cpu")) == 2 })
	if e := h.ev.of("cpu")[0]; !strings.Contains(e.Reason, "used 100% of its 0.5 cpu with 60 requests in flight, throttled in 0% of") {
		t.Fatalf("cpu event %q does not say why", e.Reason)
	}

	// The requests are answered: idle, the quota goes back to the base
	// once the hold has passed.
	busy(0)
	for i := 0; i < 30; i++ {
		h.advance(time.Second)
		if q, _ := h.rt.cpu(id); q == 0.5 {
			return
		}
	}
	q, ups := h.rt.cpu(id)
	t.Fatalf("idle after the requests: quota %g, updates %v; want back to 0.5", q, ups)
}
