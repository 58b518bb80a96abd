package serving

import (
	"testing"
	"time"

	"github.com/shoal-run/shoal/internal/clock"
	"github.com/shoal-run/shoal/internal/route"
)

// A quiet app's controller leaves its slow rounds as soon as the proxy's
// load shows a request the last round did not see: a burst onto a ready
// replica (the proxy does not wake the app, an endpoint is free) reaches
// the autoscaler within a tick, not a quietRound.
func TestQuietEndedByTraffic(t *testing.T) {
	clk := clock.NewFake(time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC))
	old := clk.Now()
	clk.Advance(5 * time.Second)
	round := clk.Now()
	clk.Advance(tick)
	now := clk.Now()
	for _, c := range []struct {
		name string
		load route.Load
		want bool
	}{
		{"no request ever", route.Load{}, false},
		{"last request before the round", route.Load{LastRequest: old}, false},
		{"last request at the round", route.Load{LastRequest: round}, false},
		{"a request in flight", route.Load{InFlight: 3, LastRequest: old}, true},
		{"a request queued", route.Load{InFlight: 1, Queued: 1, LastRequest: old}, true},
		{"a request came and went since the round", route.Load{LastRequest: now}, true},
	} {
		if got := quietEnded(c.load, round); got != c.want {
			t.Errorf("%s: quietEnded = %v, want %v", c.name, got, c.want)
		}
	}
}

// A burst onto the ready replica of a quiet app (the proxy wakes nobody:
// an endpoint is free) is seen by a round within a few ticks, not at the
// next quietRound.
func TestQuietAppSeesBurstWithinTicks(t *testing.T) {
	h := newHarness(t)
	h.deploy("max = 4\ntarget_concurrency = 1\nidle_timeout = \"1h\"")
	h.r.setLoad(route.Load{InFlight: 1, LastRequest: h.clock.Now()})
	h.m.Activate("hello")
	h.advanceUntil("one ready", tick, func() bool { return len(h.replicas()[StateReady]) == 1 })
	h.r.setLoad(route.Load{LastRequest: h.clock.Now()})
	for range 4 { // past quietAfter: the app's rounds are quietRound apart
		h.advance(time.Second)
	}
	ctl := h.m.app("hello")
	h.r.setLoad(route.Load{InFlight: 4, LastRequest: h.clock.Now()})
	at := h.clock.Now().UnixNano()
	for range 5 { // half a quietRound
		h.clock.Advance(tick)
		for deadline := time.Now().Add(5 * time.Second); time.Now().Before(deadline); {
			if ctl.roundAt.Load() > at {
				return
			}
			time.Sleep(time.Millisecond)
		}
	}
	t.Fatalf("no round in 5 ticks after a burst onto a quiet app's ready replica")
}
