package serving

import (
	"strings"
	"testing"
)

// An idle app's last ready replica stays ready until idle_timeout; the
// autoscaler's count goes 1 → 0 once, not 1 → 0 and back 0 → 1 every
// scale-down delay until the replica freezes (each a scale event and a
// store write).
func TestIdleReadyAppDoesNotFlap(t *testing.T) {
	h := newHarness(t)
	h.deploy(`idle_timeout = "60s"` + "\n" + `freeze_timeout = "10m"`)
	h.m.Activate("hello")
	h.wait("ready", func() bool { return len(h.replicas()[StateReady]) == 1 })
	for i := 0; i < 500; i++ { // 50 s, short of idle_timeout
		h.advance(tick)
	}
	if n := len(h.replicas()[StateReady]); n != 1 {
		t.Fatalf("%d ready replicas before idle_timeout, want 1", n)
	}
	var moves []string
	for _, e := range h.ev.of("scale") {
		moves = append(moves, strings.SplitN(e.Reason, ":", 2)[0])
	}
	if len(moves) != 2 || moves[0] != "0 → 1 replicas" || moves[1] != "1 → 0 replicas" {
		t.Fatalf("scale events %q, want the wake-up and one scale-in", moves)
	}
}
