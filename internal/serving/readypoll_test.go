package serving

import (
	"testing"
	"time"
)

func TestReadyPoll(t *testing.T) {
	ms := time.Millisecond
	for _, c := range []struct {
		since  time.Duration
		waited bool
		want   time.Duration
	}{
		{0, true, 500 * time.Microsecond},
		{99 * ms, true, 500 * time.Microsecond},
		{100 * ms, true, 2 * ms},
		{0, false, 2 * ms},
		{299 * ms, false, 2 * ms},
		{300 * ms, true, 10 * ms},
		{2299 * ms, false, 10 * ms},
		{2300 * ms, true, 50 * ms},
		{time.Hour, false, 50 * ms},
	} {
		if got := readyPoll(c.since, c.waited); got != c.want {
			t.Errorf("readyPoll(%s, waited %v) = %s, want %s", c.since, c.waited, got, c.want)
		}
	}
}

// nextProbe waits for the first readiness probe of the app's starting
// replica (health check "/held", failing) and returns how long after it
// the next is armed, on the fake clock.
func nextProbe(h *harness) time.Duration {
	h.t.Helper()
	h.wait("the first probe", func() bool { return h.heldProbes.Load() >= 1 })
	var d time.Duration
	h.wait("the next probe armed", func() bool {
		var ok bool
		d, ok = h.clock.Next()
		return ok && d <= 2*time.Millisecond
	})
	return d
}

// A start for a request that waits (a cold start) probes the new
// replica's port every 500 µs, not every 2 ms: an app that boots in a few
// milliseconds is routed within half a millisecond of listening.
func TestReadyProbesFastForAWaitingRequest(t *testing.T) {
	h := newHarness(t)
	h.held.Store(true)
	h.deploy("min = 0\nmax = 1", "[health]\nhttp = \"/held\"")
	h.m.Activate("hello")
	if d := nextProbe(h); d != 500*time.Microsecond {
		t.Fatalf("next probe of a cold start in %s, want 500µs", d)
	}
	h.clock.Advance(500 * time.Microsecond)
	h.wait("the second probe", func() bool { return h.heldProbes.Load() >= 2 })
	h.held.Store(false)
	h.advanceUntil("ready", time.Millisecond, func() bool { return len(h.replicas()[StateReady]) == 1 })
}

// A start no request waits for (min = 1) probes every 2 ms: a burst of
// starts to scale out keeps its CPU for the replicas' boot.
func TestReadyProbesEvery2msWithoutARequest(t *testing.T) {
	h := newHarness(t)
	h.held.Store(true)
	h.deploy("min = 1\nmax = 1", "[health]\nhttp = \"/held\"")
	if d := nextProbe(h); d != 2*time.Millisecond {
		t.Fatalf("next probe of a start no request waits for in %s, want 2ms", d)
	}
	h.held.Store(false)
	h.advanceUntil("ready", time.Millisecond, func() bool { return len(h.replicas()[StateReady]) == 1 })
}
