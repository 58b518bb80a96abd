package serving

import (
	"fmt"
	"time"

	"github.com/shoal-run/shoal/internal/route"
)

// selfFloor is the active replica count an app asked for through the self
// API (replicate raises it, halt and die lower it), set at at; 0 leaves
// the count to the autoscaler.
type selfFloor struct {
	n  int
	at time.Time
}

// raise keeps at least n replicas serving, as the app asked.
func (f *selfFloor) raise(now time.Time, n int) {
	f.n, f.at = max(f.n, n), now
}

// lower lets the count go down to n once the app gave a replica up.
func (f *selfFloor) lower(n int) {
	f.n = max(min(f.n, n), 0)
}

// apply raises the autoscaler's want to what the app asked for; the app's
// request lapses once the app has had no request for idle since it was
// made.
func (f *selfFloor) apply(now time.Time, load route.Load, idle time.Duration, want int, reason string) (int, string) {
	if f.n > 0 {
		if load.InFlight == 0 && now.Sub(f.at) >= idle && now.Sub(load.LastRequest) >= idle {
			f.n = 0
		} else if f.n > want {
			want, reason = f.n, fmt.Sprintf("the app asked for %d replica(s) through its self API (autoscaler: %s)", f.n, reason)
		}
	}
	return want, reason
}

// capHalted caps want at max less the halted replicas: they still run, so
// they count toward max.
func capHalted(want int, reason string, halted, maxReplicas int) (int, string) {
	if halted > 0 && want > maxReplicas-halted {
		want = max(maxReplicas-halted, 0)
		reason = fmt.Sprintf("%s; %d halted replica(s) count toward max %d", reason, halted, maxReplicas)
	}
	return want, reason
}

// metricSum is the app's own metric name summed over its ready replicas
// (the average per replica times their count): a replica that has not
// published it lately counts 0.
func metricSum(name string, now time.Time, ready []*replica) float64 {
	if name == "" {
		return 0
	}
	var sum float64
	for _, r := range ready {
		if v, ok := r.self.metrics[name]; ok && now.Sub(v.at) < metricTTL {
			sum += v.value
		}
	}
	return sum
}
