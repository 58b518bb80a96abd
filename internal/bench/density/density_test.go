package density

import (
	"strings"
	"testing"

	"github.com/shoal-run/shoal/internal/bench"
	"github.com/shoal-run/shoal/internal/bench/benchtest"
)

// TestQuick runs the suite for real in quick mode (20 apps) and checks its
// report.
func TestQuick(t *testing.T) {
	s, _ := bench.Lookup("density")
	benchtest.Quick(t, s, func(t *testing.T, rep *bench.Report, _ string) {
		section := rep.Section()
		benchtest.CheckTables(t, rep, map[string][]string{idleTitle: {"20 ready replicas", "20 frozen replicas"}})
		if !containsAll(section, summaryTitle, "| 20 |") {
			t.Errorf("no %q table with a row for 20 apps:\n%s", summaryTitle, section)
		}
		if !containsAll(section, burstTitle, "| 20 | this build |") {
			t.Errorf("no %q table with a row for 20 apps:\n%s", burstTitle, section)
		}
		if r := rowOf(rep); r != nil && (r.zipfFailed != 0 || r.zipfOK == 0) {
			t.Errorf("Zipf run: %d ok, %d failed (%s)", r.zipfOK, r.zipfFailed, r.zipfCodes)
		}
	})
}

func containsAll(s string, parts ...string) bool {
	for _, p := range parts {
		if !strings.Contains(s, p) {
			return false
		}
	}
	return true
}

// rowOf returns the smallest size's row of the last run.
func rowOf(*bench.Report) *sizeRow {
	if last == nil {
		return nil
	}
	return last.rows["20"]
}
