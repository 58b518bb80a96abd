package fastcontainer

import (
	"math"
	"testing"
	"time"

	"github.com/shoal-run/shoal/internal/api/types"
	"github.com/shoal-run/shoal/internal/bench"
	"github.com/shoal-run/shoal/internal/bench/benchtest"
	"github.com/shoal-run/shoal/internal/bench/kit"
)

// TestQuick runs the suite for real in quick mode (a few hundred requests
// a run) and checks its mechanics: the reference run and the scale-out's
// windows measured, the decision found in the events, the tables and
// charts there; experiment 2's slowboot and Django apps measured cold,
// restored from their checkpoints (real CRIU), thawed and warm. It
// asserts no time.
func TestQuick(t *testing.T) {
	s, _ := bench.Lookup("fastcontainer")
	benchtest.Quick(t, s, func(t *testing.T, rep *bench.Report, docs string) {
		benchtest.CheckTables(t, rep, map[string][]string{
			tLatency:  {rOne, rOutAfter},
			tReaction: {rxOutDec, rxOutDone},
			tRestore: {"slowboot, " + rsCold, "slowboot, " + rsRestored, "slowboot, " + rsThawed, "slowboot, " + rsWarm,
				"django, " + rsCold, "django, " + rsRestored, "django, " + rsThawed, "django, " + rsWarm},
		})
		for _, name := range []string{"fastcontainer-latency.svg", "fastcontainer-quota.svg"} {
			if _, ok := rep.Charts()[name]; !ok {
				t.Errorf("no chart %s", name)
			}
		}
	})
}

// TestAnalyze: the first raise, the first scale-out decision and the first
// sample with two ready replicas are found within the load only; lowered
// quotas are counted, and the share of samples at the ceiling.
func TestAnalyze(t *testing.T) {
	t0 := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	at := func(s float64) time.Time { return t0.Add(time.Duration(s * float64(time.Second))) }
	events := []types.Event{
		{Time: at(-1), Kind: "scale", Reason: "0 → 1 replicas: min 1"},
		{Time: at(-0.5), Kind: "cpu", Inputs: map[string]float64{"from": 0.3, "to": 0.6}},
		{Time: at(0.4), Kind: "scale", Reason: "1 → 2 replicas: 9.0 requests in flight, wants 10; at most 2"},
		{Time: at(0.7), Kind: "cpu", Inputs: map[string]float64{"from": 0.3, "to": 0.6}},
		{Time: at(1.5), Kind: "cpu", Inputs: map[string]float64{"from": 0.6, "to": 0.45}},
		{Time: at(2.5), Kind: "cpu", Inputs: map[string]float64{"from": 0.45, "to": 0.6}},
		{Time: at(9), Kind: "cpu", Inputs: map[string]float64{"from": 0.6, "to": 0.3}},
	}
	samples := []kit.AppSample{
		{T: at(0.1), Ready: 1, CPUs: []float64{0.3}},
		{T: at(0.9), Ready: 1, CPUs: []float64{0.6}},
		{T: at(1.1), Ready: 2, CPUs: []float64{0.6, 0.3}},
		{T: at(2), Ready: 2, CPUs: []float64{0.45, 0.6}},
		{T: at(9), Ready: 1, CPUs: []float64{0.3}},
	}
	r := analyze(t0, 5, events, samples, 0.6)
	if r.up != 0.7 || r.upTo != 0.6 || r.out != 0.4 || math.Abs(r.ready-1.1) > 1e-9 || r.ups != 2 || r.downs != 1 || r.held != 0.5 {
		t.Errorf("analyze = %+v", r)
	}
	none := analyze(t0, 5, nil, nil, 0.6)
	if !math.IsNaN(none.up) || !math.IsNaN(none.out) || !math.IsNaN(none.ready) || !math.IsNaN(none.held) {
		t.Errorf("analyze of nothing = %+v", none)
	}
}

// TestBetween: a request counts in a window only when the whole second ab
// stamped it with lies inside; the part of the first second before the
// launch is not counted against it.
func TestBetween(t *testing.T) {
	launch := time.Date(2026, 1, 1, 0, 0, 10, int(600*time.Millisecond), time.UTC)
	r := kit.ABRun{Begin: time.Date(2026, 1, 1, 0, 0, 10, 0, time.UTC),
		Starts: []float64{0, 0, 1, 2, 3}, TTimes: []float64{1, 2, 3, 4, 5}}
	cases := []struct {
		from, to float64
		want     []float64
	}{
		{0, math.Inf(1), []float64{1, 2, 3, 4, 5}},
		{0, 0.4, []float64{1, 2}}, // the first second ends 0.4 s after the launch
		{0, 0.3, nil},
		{0.4, 1.4, []float64{3}},
		{0.5, math.Inf(1), []float64{4, 5}},
	}
	for _, c := range cases {
		got := between(r, launch, c.from, c.to)
		if len(got) != len(c.want) {
			t.Errorf("between(%g, %g) = %v, want %v", c.from, c.to, got, c.want)
			continue
		}
		for i := range got {
			if got[i] != c.want[i] {
				t.Errorf("between(%g, %g) = %v, want %v", c.from, c.to, got, c.want)
				break
			}
		}
	}
}

func TestFirstOf(t *testing.T) {
	if firstOf(1, 2) != 1 || firstOf(math.NaN(), 2) != 2 || firstOf(3, math.NaN()) != 3 || !math.IsNaN(firstOf(math.NaN(), math.NaN())) {
		t.Error("firstOf")
	}
}
