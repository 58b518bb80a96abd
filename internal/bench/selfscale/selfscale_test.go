package selfscale

import (
	"testing"

	"github.com/shoal-run/shoal/internal/bench"
	"github.com/shoal-run/shoal/internal/bench/benchtest"
)

// TestQuick runs the suite for real in quick mode and checks its report.
func TestQuick(t *testing.T) {
	s, _ := bench.Lookup("selfscale")
	benchtest.Quick(t, s, checkQuickSelfscale)
}

// checkQuickSelfscale checks that the selfscale report measured the
// replicate rows, plotted the step and failed no request.
func checkQuickSelfscale(t *testing.T, rep *bench.Report, _ string) {
	var found bool
	for _, tab := range rep.Tables() {
		if tab.Title != "Replicate to a second ready replica" {
			continue
		}
		found = true
		for _, name := range []string{ssThaw, ssStart, ssCold} {
			if w := tab.Row(name); !w.OK() {
				t.Errorf("row %q has no numbers: %s", name, w.Err)
			}
		}
	}
	if !found {
		t.Error("no replicate table")
	}
	for _, name := range []string{"selfscale-load.svg", "selfscale-replicas.svg", "selfscale-latency.svg"} {
		if _, ok := rep.Charts()[name]; !ok {
			t.Errorf("no chart %s", name)
		}
	}
}
