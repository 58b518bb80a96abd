package serving

import (
	"testing"
	"time"

	"github.com/shoal-run/shoal/internal/route"
)

// A ready replica without traffic that passes its checks is checked less
// and less often: every interval for idleChecksAfter checks, then at a
// wait doubling up to idleCheckMax. A request to its app after the quiet
// spell (seen by the quiet apps' sweep) brings its checks back to every
// interval.
func TestIdleHealthChecksSpaceOut(t *testing.T) {
	h := newHarness(t)
	h.deploy("min = 1\nmax = 1\nidle_timeout = \"5s\"", "[health]\ncommand = [\"/bin/check\"]\ninterval = \"1s\"")
	h.wait("ready", func() bool { return len(h.replicas()[StateReady]) == 1 })
	id := h.replicas()[StateReady][0]
	ctl := h.m.app("hello")
	ctl.mu.Lock()
	r := ctl.reps[id]
	ctl.mu.Unlock()
	h.wait("the health loop", func() bool { return r.armedAt.Load() > 0 })
	// span moves the clock by d, a second at a time, and waits until the
	// health loop has armed again after the last second; it returns the
	// checks made meanwhile.
	span := func(d time.Duration) int {
		t.Helper()
		n := h.rt.execs(id)
		for range int(d / time.Second) {
			h.clock.Advance(time.Second)
		}
		at := h.clock.Now().UnixNano()
		h.wait("the health loop's interval", func() bool { return r.armedAt.Load() >= at })
		return h.rt.execs(id) - n
	}
	for i := range idleChecksAfter + 1 {
		if n := span(time.Second); n != 1 {
			t.Fatalf("interval %d without traffic: %d checks, want 1", i+1, n)
		}
	}
	for _, d := range []time.Duration{2 * time.Second, 4 * time.Second, 8 * time.Second, 16 * time.Second, idleCheckMax, idleCheckMax} {
		if n := span(d); n != 1 {
			t.Fatalf("the wait after %d idle checks: %d checks in %s, want 1 at its end", r.armedAt.Load(), n, d)
		}
	}
	// A request: the sweep sees it within a tick, and the checks are
	// every interval again.
	h.clock.Advance(tick / 2)
	now := h.clock.Now()
	h.r.setLoad(route.Load{InFlight: 1, LastRequest: now, Requests: 1,
		Endpoints: map[string]route.EndpointLoad{id: {InFlight: 1, LastRequest: now, Requests: 1}}})
	h.clock.Advance(tick)
	at := h.clock.Now().UnixNano()
	h.wait("the health loop re-armed by the request", func() bool { return r.armedAt.Load() >= at })
	h.r.setLoad(route.Load{LastRequest: now, Requests: 1,
		Endpoints: map[string]route.EndpointLoad{id: {LastRequest: now, Requests: 1}}})
	for i := range 3 {
		if n := span(time.Second); n != 1 {
			t.Fatalf("interval %d after a request: %d checks, want 1", i+1, n)
		}
	}
}

// healthCount.wait: the interval for idleChecksAfter idle checks, then
// doubling up to idleCheckMax; an interval longer than that stays.
func TestHealthWait(t *testing.T) {
	for _, c := range []struct {
		idle     int
		interval time.Duration
		want     time.Duration
	}{
		{0, time.Second, time.Second},
		{idleChecksAfter, time.Second, time.Second},
		{idleChecksAfter + 1, time.Second, 2 * time.Second},
		{idleChecksAfter + 3, time.Second, 8 * time.Second},
		{idleChecksAfter + 50, time.Second, idleCheckMax},
		{idleChecksAfter + 2, 10 * time.Second, idleCheckMax},
		{idleChecksAfter + 9, time.Minute, time.Minute},
	} {
		hc := healthCount{idle: c.idle}
		if got := hc.wait(c.interval); got != c.want {
			t.Errorf("wait(%s) after %d idle checks = %s, want %s", c.interval, c.idle, got, c.want)
		}
	}
}

// A stateful app's ready replica keeps its checks every interval however
// long it goes without a request through the proxy: its peers and
// clients may reach it directly, and a hung member stalls its peers.
func TestStatefulHealthChecksStayEveryInterval(t *testing.T) {
	h := newHarness(t)
	h.deploy("", "[stateful]\nreplicas = 1\n[volumes]\ndata = \"/data\"", "[health]\ncommand = [\"/bin/check\"]\ninterval = \"1s\"")
	h.wait("ready", func() bool { return len(h.replicas()[StateReady]) == 1 })
	id := h.replicas()[StateReady][0]
	ctl := h.m.app("hello")
	ctl.mu.Lock()
	r := ctl.reps[id]
	ctl.mu.Unlock()
	h.wait("the health loop", func() bool { return r.armedAt.Load() > 0 })
	for i := range 3 * idleChecksAfter {
		n := h.rt.execs(id)
		h.clock.Advance(time.Second)
		at := h.clock.Now().UnixNano()
		h.wait("the health loop's next interval", func() bool { return r.armedAt.Load() >= at })
		if got := h.rt.execs(id) - n; got != 1 {
			t.Fatalf("interval %d without traffic: %d checks, want 1", i+1, got)
		}
	}
}
