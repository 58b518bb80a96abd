package autoscale

import (
	"strings"
	"testing"
	"time"
)

// runMetric feeds the app metric m (with concurrency conc, which the
// policy must ignore) for dur, as the controller does, and returns the
// decisions.
func (r *rig) runMetric(dur time.Duration, m, conc float64) []Decision {
	var out []Decision
	for i := 1; i <= int(dur/(100*time.Millisecond)); i++ {
		r.c.Advance(100 * time.Millisecond)
		r.d.Observe(Sample{Concurrency: conc, Metric: m})
		if i%10 == 0 {
			dec := r.d.Decide(Current{Replicas: r.n})
			r.n = dec.Replicas
			out = append(out, dec)
		}
	}
	return out
}

// With [scale] metric, the app's own metric, summed over its replicas,
// decides at the per-replica target: concurrency plays no part.
func TestMetricDrivesReplicas(t *testing.T) {
	r := newRig(t, Policy{Min: 1, Max: 10, TargetConcurrency: 1, Metric: "queue", Target: 10}, 1)
	decs := r.runMetric(2*time.Second, 35, 0)
	last := decs[len(decs)-1]
	if last.Replicas != 4 {
		t.Fatalf("queue 35 at target 10: %d replicas, want 4 (%s)", last.Replicas, last.Reason)
	}
	if !strings.Contains(last.Reason, "metric queue") || last.Inputs["target_metric"] != 10 {
		t.Fatalf("reason or inputs do not name the metric: %q %v", last.Reason, last.Inputs)
	}
	if _, ok := last.Inputs["stable_concurrency"]; ok {
		t.Fatalf("a metric decision reports concurrency: %v", last.Inputs)
	}
	// Much concurrency, a small metric: the metric decides. It shrinks
	// only after the windows and the scale-down delay, halving per step.
	decs = r.runMetric(10*time.Second, 5, 500)
	if got := decs[0].Replicas; got != 4 {
		t.Fatalf("shrank at once: %d", got)
	}
	decs = r.runMetric(30*time.Second, 5, 500)
	if got := decs[len(decs)-1].Replicas; got != 1 {
		t.Fatalf("metric 5 at target 10 for 40s: %d replicas, want 1 (%s)", got, decs[len(decs)-1].Reason)
	}
}

// The metric alone counts as traffic: an app whose replicas report work
// and receive no request does not scale to zero.
func TestMetricKeepsAppAwake(t *testing.T) {
	r := newRig(t, Policy{Min: 0, Max: 10, Metric: "queue"}, 1)
	decs := r.runMetric(30*time.Second, 3, 0)
	if got := decs[len(decs)-1].Replicas; got != 1 {
		t.Fatalf("metric 3 without requests: %d replicas, want 1", got)
	}
	decs = r.runMetric(30*time.Second, 0, 0)
	if got := decs[len(decs)-1].Replicas; got != 0 {
		t.Fatalf("metric 0 without requests for 30s: %d replicas, want 0", got)
	}
}

// A burst of the metric panics like a burst of requests.
func TestMetricPanics(t *testing.T) {
	r := newRig(t, Policy{Min: 1, Max: 20, Metric: "players", Target: 5}, 1)
	r.runMetric(10*time.Second, 4, 0)
	decs := r.runMetric(time.Second, 50, 0)
	if d := decs[len(decs)-1]; !d.Panic || d.Replicas < 5 {
		t.Fatalf("metric burst: %+v", d)
	}
}

func TestMetricPolicyDefaults(t *testing.T) {
	p := Policy{Metric: "queue"}.WithDefaults()
	if p.Target != DefaultTargetConcurrency {
		t.Fatalf("default target %g", p.Target)
	}
	if err := (Policy{Metric: "queue", Target: -1}).WithDefaults().Validate(); err == nil || !strings.Contains(err.Error(), "scale.target") {
		t.Fatalf("negative target: %v", err)
	}
}
