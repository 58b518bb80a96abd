package bench

import (
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
)

// testWriter sends progress lines to the test log.
type testWriter struct{ t *testing.T }

func (w testWriter) Write(p []byte) (int, error) {
	w.t.Log(strings.TrimRight(string(p), "\n"))
	return len(p), nil
}

// buildShoal builds cmd/shoal into a temporary folder.
func buildShoal(t *testing.T) string {
	t.Helper()
	bin := filepath.Join(t.TempDir(), "shoal")
	cmd := exec.Command("go", "build", "-o", bin, "./cmd/shoal")
	cmd.Dir = "../.."
	cmd.Env = append(os.Environ(), "CGO_ENABLED=0")
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("go build ./cmd/shoal: %v\n%s", err, out)
	}
	return bin
}

// quickChecks holds extra checks of a suite's quick report, by suite name.
// A suite's own test file adds its entry from an init function.
var quickChecks = map[string]func(t *testing.T, rep *Report, docs string){
	"lifecycle": checkQuickLifecycle,
}

// TestQuickSuites runs every registered suite for real in quick mode
// (BENCH_QUICK=1), writes the docs, and checks that every table row has
// numbers or says why not, that every chart is well-formed, and that nothing
// is left behind. It keeps the harness from rotting; it asserts no speed.
func TestQuickSuites(t *testing.T) {
	needRoot(t, "runc", "podman", "go")
	bin := buildShoal(t)
	docs := os.Getenv("BENCH_TEST_DOCS")
	if docs == "" {
		docs = t.TempDir()
	}
	for _, s := range Suites() {
		t.Run(s.Name, func(t *testing.T) {
			dataDir := t.TempDir()
			rep, err := RunSuite(context.Background(), s, Options{
				Quick: true, ShoalBin: bin, DataDir: dataDir, Out: testWriter{t},
			})
			if err != nil {
				t.Fatal(err)
			}
			if err := rep.WriteDocs(docs); err != nil {
				t.Fatal(err)
			}
			raw, err := os.ReadFile(filepath.Join(docs, "bench", s.Name+".md"))
			if err != nil {
				t.Fatal(err)
			}
			text := string(raw)
			if !strings.HasPrefix(text, "## ") || !strings.Contains(text, "| kernel |") || !strings.Contains(text, "`BENCH_QUICK=1 shoal bench "+s.Name+"`") {
				t.Errorf("section lacks its heading, machine or command:\n%s", text)
			}
			for _, tab := range rep.Tables() {
				for _, w := range tab.Rows {
					if !w.OK() && strings.TrimSpace(w.Err) == "" {
						t.Errorf("table %q row %q has neither numbers nor a reason", tab.Title, w.Name)
					}
				}
			}
			for name, svg := range rep.Charts() {
				wellFormed(t, svg)
				if !strings.Contains(text, "("+name+")") {
					t.Errorf("section does not link chart %s", name)
				}
			}
			if check := quickChecks[s.Name]; check != nil {
				check(t, rep, docs)
			}
			assertNoLeftovers(t, dataDir)
		})
	}
}

// checkQuickLifecycle checks that the lifecycle report has numbers in every
// row that must have them.
func checkQuickLifecycle(t *testing.T, rep *Report, docs string) {
	for _, key := range []string{keyShoalRunNone, keyShoalRunBridge, keyRuncRun, keyRuncRunSeccomp, keyPodmanRun, keyAPIRun,
		keyAPISplitNone, keyAPISplitBridge, keyRuncSplit, keyShoalVersion, keyShoalPs} {
		res := rep.Result(key)
		if !res.OK() {
			t.Errorf("subject %s has no numbers: %+v", key, res)
			continue
		}
		for _, ph := range res.Phases {
			if n := len(res.Samples[ph]); n != rep.Runs {
				t.Errorf("subject %s phase %s: %d samples, want %d", key, ph, n, rep.Runs)
			}
		}
	}
	// A subject that cannot run on this host (crun on hybrid cgroups) must
	// say why.
	for _, res := range rep.Results {
		if !res.OK() && strings.TrimSpace(res.Err) == "" {
			t.Errorf("subject %s failed without a reason", res.Key)
		}
	}

	md, err := os.ReadFile(filepath.Join(docs, "benchmarks.md"))
	if err != nil {
		t.Fatal(err)
	}
	text := string(md)
	num := `[0-9]+(\.[0-9]+)?`
	for _, res := range rep.Results {
		if !res.OK() {
			if !strings.Contains(text, "| "+res.Name+" |") || !strings.Contains(text, "not run: ") {
				t.Errorf("markdown lacks the failed row %q with its reason", res.Name)
			}
			continue
		}
		row := regexp.MustCompile(`(?m)^\| ` + regexp.QuoteMeta(res.Name) + ` \| [^|]+ \|( – \|)* ` + num + `( \(` + num + `\))? \|`)
		if !row.MatchString(text) {
			t.Errorf("markdown lacks a row with numbers for %q", res.Name)
		}
	}
	for _, want := range []string{"## How to read this", "| kernel |", "Command: `BENCH_QUICK=1 shoal bench lifecycle`",
		"| shoal run / bare runc run | ≤ 1.30× | ", "| shoal run / podman run | < 0.33× | ", "### Where `shoal run --rm` spends its time"} {
		if !strings.Contains(text, want) {
			t.Errorf("markdown lacks %q", want)
		}
	}
	if regexp.MustCompile(`\| (shoal run / bare runc run|shoal run / podman run) \| [^|]+ \| n/a \|`).MatchString(text) {
		t.Errorf("a target ratio is missing:\n%s", text)
	}
	for _, svg := range []string{"lifecycle-phases.svg", "lifecycle-samples.svg"} {
		raw, err := os.ReadFile(filepath.Join(docs, svg))
		if err != nil {
			t.Fatal(err)
		}
		wellFormed(t, raw)
	}
}

// assertNoLeftovers checks that no mount lies under dir and no container of
// the suite is known to podman.
func assertNoLeftovers(t *testing.T, dir string) {
	t.Helper()
	mounts, err := os.ReadFile("/proc/self/mountinfo")
	if err != nil {
		t.Fatal(err)
	}
	for _, line := range strings.Split(string(mounts), "\n") {
		if f := strings.Fields(line); len(f) > 4 && strings.HasPrefix(f[4], dir) {
			t.Errorf("mount left behind: %s", f[4])
		}
	}
	out, err := exec.Command("podman", "ps", "-a", "--format", "{{.Names}}").Output()
	if err != nil {
		t.Fatalf("podman ps: %v", err)
	}
	if strings.Contains(string(out), "shoal-bench-") {
		t.Errorf("podman containers left behind:\n%s", out)
	}
}
