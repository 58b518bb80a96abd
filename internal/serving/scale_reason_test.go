package serving

import (
	"regexp"
	"strconv"
	"testing"
	"time"

	"github.com/shoal-run/shoal/internal/route"
)

// TestScaleReasonAgrees: a scale event's reason agrees with its count.
// When a frozen app's idle rule overrides the autoscaler (whose window
// still remembers the traffic), the event does not read "1 → 0 replicas:
// ... wants 1; 0→1".
func TestScaleReasonAgrees(t *testing.T) {
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
	for range 5 {
		h.advance(tick)
	}
	head := regexp.MustCompile(`^(\d+) → (\d+) replicas: `)
	step := regexp.MustCompile(`(\d+)→(\d+)`)
	for _, e := range h.ev.of("scale") {
		t.Logf("scale: %s", e.Reason)
		m := head.FindStringSubmatch(e.Reason)
		if m == nil {
			t.Errorf("scale event %q: no count in front", e.Reason)
			continue
		}
		to := m[2]
		for _, s := range step.FindAllStringSubmatch(e.Reason[len(m[0]):], -1) {
			if s[2] != to {
				n, _ := strconv.Atoi(to)
				t.Errorf("scale event %q to %d replicas gives another count (%s) as its reason", e.Reason, n, s[0])
			}
		}
	}
}
