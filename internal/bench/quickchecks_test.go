package bench

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

func init() {
	quickChecks["jobs"] = checkQuickJobs
	quickChecks["storage"] = measuredRows("shoal", "host")
	quickChecks["host"] = measuredRows("shoal", "host", "container")
}

// measuredRows returns a quick check that every row whose name starts with
// one of prefixes has numbers: shoal's own rows and the bare host's can run
// on any host this suite supports, so "not run" there is a broken harness.
// Rows of other baselines may say why they cannot run.
func measuredRows(prefixes ...string) func(t *testing.T, rep *Report, docs string) {
	return func(t *testing.T, rep *Report, _ string) {
		seen := 0
		for _, tab := range rep.Tables() {
			for _, w := range tab.Rows {
				for _, p := range prefixes {
					if !strings.HasPrefix(w.Name, p) {
						continue
					}
					seen++
					if !w.OK() {
						t.Errorf("table %q row %q has no numbers: %s", tab.Title, w.Name, w.Err)
					}
				}
			}
		}
		if seen == 0 {
			t.Errorf("no row starts with any of %q", prefixes)
		}
	}
}

// checkQuickJobs checks that every shoal and bare runc row of the jobs report
// has numbers and that the targets have verdicts.
func checkQuickJobs(t *testing.T, rep *Report, docs string) {
	measuredRows("shoal job", "bare runc run", "queue", "create", "start", "exec", "teardown")(t, rep, docs)
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
