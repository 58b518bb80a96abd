package bench

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

func TestWriteDocsOrdersSuites(t *testing.T) {
	dir := t.TempDir()
	for _, s := range []string{"zeta", "jobs", "lifecycle"} {
		if err := WriteDocs(dir, s, "## "+s+"\n", nil); err != nil {
			t.Fatal(err)
		}
	}
	if err := WriteDocs(dir, "lifecycle", "## lifecycle again\n", map[string][]byte{"a.svg": []byte("<svg/>")}); err != nil {
		t.Fatal(err)
	}
	raw, err := os.ReadFile(filepath.Join(dir, "benchmarks.md"))
	if err != nil {
		t.Fatal(err)
	}
	text := string(raw)
	i, j, k := strings.Index(text, "## lifecycle again"), strings.Index(text, "## jobs"), strings.Index(text, "## zeta")
	if i < 0 || j < 0 || k < 0 || !(i < j && j < k) || !strings.HasPrefix(text, "# Benchmarks") {
		t.Fatalf("sections out of order or missing:\n%s", text)
	}
	if strings.Contains(text, "## lifecycle\n") {
		t.Error("old lifecycle section kept")
	}
	if _, err := os.Stat(filepath.Join(dir, "a.svg")); err != nil {
		t.Error(err)
	}
}

func TestWriteDocsRefusesBadNames(t *testing.T) {
	dir := t.TempDir()
	for _, s := range []string{"", "../x", ".hidden", "a/b"} {
		if err := WriteDocs(dir, s, "x", nil); err == nil {
			t.Errorf("suite %q accepted", s)
		}
	}
	if err := WriteDocs(dir, "ok", "x", map[string][]byte{"../evil.svg": nil}); err == nil {
		t.Error("chart name with a folder accepted")
	}
	if _, err := os.Stat(filepath.Join(dir, "bench", "ok.md")); !os.IsNotExist(err) {
		t.Error("a refused write left a section behind")
	}
}

// TestMarkdownFromSyntheticResults renders a report without running anything.
func TestMarkdownFromSyntheticResults(t *testing.T) {
	res := func(key, name string, d time.Duration, phases ...string) *Result {
		r := &Result{Key: key, Name: name, Command: "cmd " + key, Phases: append(phases, phaseTotal), Samples: map[string][]time.Duration{}}
		for _, ph := range r.Phases {
			r.Samples[ph] = []time.Duration{d, d + time.Millisecond, d + 2*time.Millisecond}
		}
		return r
	}
	rep := &Report{Suite: "lifecycle", Command: "shoal bench lifecycle", Runs: 3, Warmup: 1, Started: time.Now(),
		Results: []*Result{
			res(keyShoalRunNone, "shoal run (network none)", 25*time.Millisecond),
			res(keyRuncRun, "bare runc run", 20*time.Millisecond),
			res(keyPodmanRun, "podman run (runc)", 100*time.Millisecond),
			res(keyAPISplitNone, "shoal runtime API, split (runc, none)", 5*time.Millisecond, phaseNet, phaseCreate, phaseStart, phaseExec, phaseDelete),
			res(keyRuncSplit, "bare runc, split", 6*time.Millisecond, phaseCreate, phaseStart, phaseExec, phaseDelete),
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
		if c := wellFormed(t, svg); c["svg"] != 1 {
			t.Errorf("%s: not one svg element", name)
		}
	}
}
