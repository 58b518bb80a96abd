package serving

import (
	"testing"
	"time"
)

// metric reads one series of family name from the harness's registry: the
// series whose labels are exactly labels. It returns a gauge's or a
// counter's value, or a histogram's sample count, and false when there is
// no such series.
func (h *harness) metric(name string, labels map[string]string) (float64, bool) {
	h.t.Helper()
	mfs, err := h.reg.Gather()
	if err != nil {
		h.t.Fatalf("gather metrics: %v", err)
	}
	for _, mf := range mfs {
		if mf.GetName() != name {
			continue
		}
	series:
		for _, m := range mf.GetMetric() {
			if len(m.GetLabel()) != len(labels) {
				continue
			}
			for _, l := range m.GetLabel() {
				if v, ok := labels[l.GetName()]; !ok || v != l.GetValue() {
					continue series
				}
			}
			switch {
			case m.GetHistogram() != nil:
				return float64(m.GetHistogram().GetSampleCount()), true
			case m.GetCounter() != nil:
				return m.GetCounter().GetValue(), true
			default:
				return m.GetGauge().GetValue(), true
			}
		}
	}
	return 0, false
}

// shoal_app_replicas counts an app's replicas by state as they move along
// the ladder; shoal_app_activation_seconds observes each start and each
// thaw; shoal_app_replica_failures_total counts crashes;
// shoal_app_scale_decisions_total counts the wake-up and the scale-in.
func TestMetricsFollowTheLadder(t *testing.T) {
	h := newHarness(t)
	h.deploy(`idle_timeout = "30s"` + "\n" + `freeze_timeout = "10m"`)
	replicas := func(state State) float64 {
		t.Helper()
		v, ok := h.metric("shoal_app_replicas", map[string]string{"app": "hello", "state": string(state)})
		if !ok {
			t.Fatalf("no shoal_app_replicas series for state %s", state)
		}
		return v
	}
	activations := func(kind string) float64 {
		v, _ := h.metric("shoal_app_activation_seconds", map[string]string{"app": "hello", "kind": kind})
		return v
	}
	if r, a := replicas(StateReady), activations("start"); r != 0 || a != 0 {
		t.Fatalf("before a request: %g ready, %g starts observed", r, a)
	}

	h.m.Activate("hello")
	h.wait("a start is observed", func() bool { return activations("start") == 1 })
	if r := replicas(StateReady); r != 1 {
		t.Fatalf("after the start: %g ready replicas in the metric, want 1", r)
	}
	decisions := func(dir, reason string) float64 {
		v, _ := h.metric("shoal_app_scale_decisions_total", map[string]string{"app": "hello", "direction": dir, "reason": reason})
		return v
	}
	if n := decisions("out", "request_waiting"); n != 1 {
		t.Fatalf("scale decisions out for a waiting request: %g, want 1", n)
	}
	h.advance(30 * time.Second)
	h.wait("the replica freezes", func() bool { return len(h.replicas()[StateFrozen]) == 1 })
	h.wait("the scale-in is counted", func() bool { return decisions("in", "autoscaler") == 1 })
	if r, f := replicas(StateReady), replicas(StateFrozen); r != 0 || f != 1 {
		t.Fatalf("after the freeze: %g ready, %g frozen in the metric; want 0 and 1", r, f)
	}
	h.m.Activate("hello")
	h.wait("a thaw is observed", func() bool { return activations("thaw") == 1 })
	if r, f, s := replicas(StateReady), replicas(StateFrozen), activations("start"); r != 1 || f != 0 || s != 1 {
		t.Fatalf("after the thaw: %g ready, %g frozen, %g starts; want 1, 0, 1", r, f, s)
	}

	h.rt.exit(h.replicas()[StateReady][0], 2)
	h.wait("the crash is counted", func() bool {
		v, _ := h.metric("shoal_app_replica_failures_total", map[string]string{"app": "hello"})
		return v == 1
	})
	// It had served for longer than the back-off, so it is replaced at
	// once; the failed replica is listed until its replacement is ready
	// and it is removed, which waits for the replacement's start to be
	// over (it may be listed failed a moment after the replacement is
	// ready).
	h.wait("the crashed replica is replaced and removed", func() bool {
		reps := h.replicas()
		return len(reps[StateReady]) == 1 && len(reps[StateFailed]) == 0
	})
	if r, f := replicas(StateReady), replicas(StateFailed); r != 1 || f != 0 {
		t.Fatalf("after the replacement: %g ready, %g failed in the metric; want 1 and 0", r, f)
	}
}

// /metrics (Manager.Gatherer) shows an app's series while it has a
// replica in service and for seriesQuiet after its last request; an app
// whose replica froze that long ago adds none: thousands of idle apps
// cost a scrape nothing.
func TestMetricsOnlyForLiveApps(t *testing.T) {
	h := newHarness(t)
	h.deploy(`idle_timeout = "30s"` + "\n" + `freeze_timeout = "1h"`)
	g := h.m.Gatherer(h.reg)
	series := func() int {
		t.Helper()
		mfs, err := g.Gather()
		if err != nil {
			t.Fatal(err)
		}
		n := 0
		for _, mf := range mfs {
			for _, x := range mf.GetMetric() {
				for _, l := range x.GetLabel() {
					if l.GetName() == "app" && l.GetValue() == "hello" {
						n++
					}
				}
			}
		}
		return n
	}
	if n := series(); n != 0 {
		t.Fatalf("%d series of an app never asked, want 0", n)
	}
	h.m.Activate("hello")
	h.wait("ready", func() bool { return len(h.replicas()[StateReady]) == 1 })
	if n := series(); n == 0 {
		t.Fatal("no series of an app with a ready replica")
	}
	h.advance(30 * time.Second)
	h.wait("the replica freezes", func() bool { return len(h.replicas()[StateFrozen]) == 1 })
	if n := series(); n == 0 {
		t.Fatal("no series of an app asked a minute ago")
	}
	h.advance(seriesQuiet)
	if n := series(); n != 0 {
		t.Fatalf("%d series of an app frozen and not asked for %s, want 0", n, seriesQuiet)
	}
	if _, ok := h.metric("shoal_app_replicas", map[string]string{"app": "hello", "state": "frozen"}); !ok {
		t.Fatal("the registry itself lost the series")
	}
}
