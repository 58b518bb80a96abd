package lifecycle

import (
	"strings"
	"testing"
	"time"

	"github.com/shoal-run/shoal/internal/bench"
	"github.com/shoal-run/shoal/internal/bench/benchtest"
	"github.com/shoal-run/shoal/internal/bench/kit"
)

// TestMarkdownFromSyntheticResults renders a report without running anything.
func TestMarkdownFromSyntheticResults(t *testing.T) {
	res := func(key, name string, d time.Duration, phases ...string) *Result {
		r := &Result{Key: key, Name: name, Command: "cmd " + key, Phases: append(phases, kit.PhaseTotal), Samples: map[string][]time.Duration{}}
		for _, ph := range r.Phases {
			r.Samples[ph] = []time.Duration{d, d + time.Millisecond, d + 2*time.Millisecond}
		}
		return r
	}
	rep := &report{Report: &bench.Report{Suite: "lifecycle", Command: "shoal bench lifecycle", Started: time.Now()}, Runs: 3, Warmup: 1,
		Results: []*Result{
			res(keyShoalRunNone, "shoal run (network none)", 25*time.Millisecond),
			res(keyRuncRun, "bare runc run", 20*time.Millisecond),
			res(keyPodmanRun, "podman run (runc)", 100*time.Millisecond),
			res(keyAPISplitNone, "shoal runtime API, split (runc, none)", 5*time.Millisecond, kit.PhaseNet, kit.PhaseCreate, kit.PhaseStart, kit.PhaseExec, kit.PhaseDelete),
			res(keyRuncSplit, "bare runc, split", 6*time.Millisecond, kit.PhaseCreate, kit.PhaseStart, kit.PhaseExec, kit.PhaseDelete),
			res(keyShoalVersion, "shoal CLI start-up", 5*time.Millisecond),
			res(keyShoalPs, "shoal CLI + one API call", 6*time.Millisecond),
			{Key: keyAPISplitCrun, Name: "shoal runtime API, split (crun, none)", Command: "c", Err: "crun said | no"},
		}}
	rep.renderLifecycle()
	md := rep.Section()
	for _, want := range []string{
		"| shoal run / bare runc run | ≤ 1.30× | 1.24× | met |",
		"| shoal run / podman run | < 0.33× | 0.26× | met |",
		"| shoal runtime API, split (crun, none) | c | not run: crun said \\| no |",
		"| bare runc, split | cmd runc-split | – | 7.00 (7.98) | 7.00 (7.98) |",
		"| CLI process start-up and exit | `shoal version` | 6.00 |",
	} {
		if !strings.Contains(md, want) {
			t.Errorf("markdown lacks %q:\n%s", want, md)
		}
	}
	for name, svg := range rep.Charts() {
		if c := benchtest.WellFormed(t, svg); c["svg"] != 1 {
			t.Errorf("%s: not one svg element", name)
		}
	}
}
