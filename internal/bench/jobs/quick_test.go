package jobs

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/shoal-run/shoal/internal/bench"
	"github.com/shoal-run/shoal/internal/bench/benchtest"
)

// TestQuick runs the suite for real in quick mode and checks its report.
func TestQuick(t *testing.T) {
	s, _ := bench.Lookup("jobs")
	benchtest.Quick(t, s, checkQuickJobs)
}

// checkQuickJobs checks that every shoal and bare runc row of the jobs report
// has numbers and that the targets have verdicts.
func checkQuickJobs(t *testing.T, rep *bench.Report, docs string) {
	benchtest.MeasuredRows("shoal job", "shoal two-step job", "bare process", "bare processes, one after the other", "bare runc run", "queue", "create", "start", "exec", "teardown")(t, rep, docs)
	two := false
	for _, tab := range rep.Tables() {
		if tab.Title == "Two-step jobs, 1 client" {
			two = tab.Row("shoal two-step job").OK() && tab.Row("bare processes, one after the other").OK()
		}
	}
	if !two {
		t.Error("jobs report has no measured two-step jobs")
	}
	raw, err := os.ReadFile(filepath.Join(docs, "bench", "jobs.md"))
	if err != nil {
		t.Fatal(err)
	}
	text := string(raw)
	if !strings.Contains(text, "Targets") {
		t.Error("jobs report has no targets")
	}
	if strings.Contains(text, "not measured") {
		t.Errorf("a jobs target is not measured:\n%s", text)
	}
}
