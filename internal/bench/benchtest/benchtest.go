// Package benchtest holds what the benchmark suites' tests share: the quick
// run of a suite (Quick) with the checks every section must pass, checks of
// tables and charts, and NeedRoot. Only tests import it.
package benchtest

import (
	"bytes"
	"context"
	"encoding/xml"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"

	"github.com/shoal-run/shoal/internal/bench"
)

// NeedRoot fails the test when it cannot run the real container tools.
func NeedRoot(t *testing.T, tools ...string) {
	t.Helper()
	if os.Geteuid() != 0 {
		t.Fatal("needs root to run containers")
	}
	for _, tool := range tools {
		if _, err := exec.LookPath(tool); err != nil {
			t.Fatalf("needs %s: %v", tool, err)
		}
	}
}

// WellFormed parses svg as XML and counts elements by name.
func WellFormed(t *testing.T, svg []byte) map[string]int {
	t.Helper()
	counts := map[string]int{}
	d := xml.NewDecoder(bytes.NewReader(svg))
	for {
		tok, err := d.Token()
		if err == io.EOF {
			break
		}
		if err != nil {
			t.Fatalf("svg is not well-formed XML: %v\n%s", err, svg)
		}
		if se, ok := tok.(xml.StartElement); ok {
			counts[se.Name.Local]++
		}
	}
	return counts
}

// CheckTables fails t unless rep has each table of must, and each of
// those has numbers in the rows must names.
func CheckTables(t *testing.T, rep *bench.Report, must map[string][]string) {
	t.Helper()
	seen := map[string]bool{}
	for _, tab := range rep.Tables() {
		seen[tab.Title] = true
		for _, name := range must[tab.Title] {
			if w := tab.Row(name); !w.OK() {
				t.Errorf("table %q row %q has no numbers: %s", tab.Title, name, w.Err)
			}
		}
	}
	for title := range must {
		if !seen[title] {
			t.Errorf("no table %q", title)
		}
	}
}

// MeasuredRows returns a quick check that every row whose name starts with
// one of prefixes has numbers: shoal's own rows and the bare host's can run
// on any host this suite supports, so "not run" there is a broken harness.
// Rows of other baselines may say why they cannot run.
func MeasuredRows(prefixes ...string) func(t *testing.T, rep *bench.Report, docs string) {
	return func(t *testing.T, rep *bench.Report, _ string) {
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

// testWriter sends progress lines to the test log.
type testWriter struct{ t *testing.T }

func (w testWriter) Write(p []byte) (int, error) {
	w.t.Log(strings.TrimRight(string(p), "\n"))
	return len(p), nil
}

// buildShoal builds cmd/shoal of this source tree into a temporary folder.
func buildShoal(t *testing.T) string {
	t.Helper()
	dir, err := os.Getwd()
	if err != nil {
		t.Fatal(err)
	}
	for {
		if _, err := os.Stat(filepath.Join(dir, "cmd", "shoal")); err == nil {
			break
		}
		if up := filepath.Dir(dir); up != dir {
			dir = up
			continue
		}
		t.Fatal("no cmd/shoal above the working directory")
	}
	bin := filepath.Join(t.TempDir(), "shoal")
	cmd := exec.Command("go", "build", "-o", bin, "./cmd/shoal")
	cmd.Dir = dir
	cmd.Env = append(os.Environ(), "CGO_ENABLED=0")
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("go build ./cmd/shoal: %v\n%s", err, out)
	}
	// shoal-init beside it, as make build puts it: the daemon's replicas
	// and premade sandboxes run it as their pid 1.
	cc := exec.Command("cc", "-static", "-O2", "-s", "-o", filepath.Join(filepath.Dir(bin), "shoal-init"), "cmd/shoal-init/shoal-init.c")
	cc.Dir = dir
	if out, err := cc.CombinedOutput(); err != nil {
		t.Fatalf("cc cmd/shoal-init: %v\n%s", err, out)
	}
	return bin
}

// lockSuites keeps quick runs of suites in different test binaries (one
// package a suite, run in parallel by go test) from overlapping: one suite
// at a time, as `shoal bench all` runs them.
func lockSuites(t *testing.T) {
	t.Helper()
	f, err := os.OpenFile(filepath.Join(os.TempDir(), "shoal-bench-quick.lock"), os.O_CREATE|os.O_RDWR, 0o600)
	if err != nil {
		t.Fatal(err)
	}
	if err := syscall.Flock(int(f.Fd()), syscall.LOCK_EX); err != nil {
		f.Close()
		t.Fatal(err)
	}
	t.Cleanup(func() { f.Close() })
}

// Quick runs suite s for real in quick mode (BENCH_QUICK=1) and checks
// its section (Section) and that nothing is left behind. It keeps the
// harness from rotting; it asserts no speed. The shoal binary is
// $SHOAL_BIN when set (make test builds it, shoal-init beside it), else
// one built from this source tree.
func Quick(t *testing.T, s bench.Suite, check func(t *testing.T, rep *bench.Report, docs string)) {
	NeedRoot(t, "runc", "podman", "go")
	bin := os.Getenv("SHOAL_BIN")
	if bin == "" {
		bin = buildShoal(t)
	}
	lockSuites(t)
	dataDir := t.TempDir()
	rep, err := bench.RunSuite(context.Background(), s, bench.Options{
		Quick: true, ShoalBin: bin, DataDir: dataDir, Out: testWriter{t},
	})
	if err != nil {
		t.Fatal(err)
	}
	Section(t, s, rep, check)
	assertNoLeftovers(t, dataDir)
}

// Section writes the docs of suite s's report rep (to $BENCH_TEST_DOCS
// when set) and checks that every table row has numbers or says why not
// (a missing program is no reason), that every chart is well-formed and
// linked, and that check (if not nil) passes.
func Section(t *testing.T, s bench.Suite, rep *bench.Report, check func(t *testing.T, rep *bench.Report, docs string)) {
	t.Helper()
	docs := os.Getenv("BENCH_TEST_DOCS")
	if docs == "" {
		docs = t.TempDir()
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
			// A program the suite runs that is missing is the machine's
			// fault, not a finding: scripts/install-deps.sh test installs
			// every one (internal/project's TestTestToolsAreInstalled).
			if strings.Contains(w.Err, exec.ErrNotFound.Error()) {
				t.Errorf("table %q row %q: a program is missing (add its package to test_pkgs in scripts/install-deps.sh): %s", tab.Title, w.Name, w.Err)
			}
		}
	}
	for name, svg := range rep.Charts() {
		WellFormed(t, svg)
		if !strings.Contains(text, "("+name+")") {
			t.Errorf("section does not link chart %s", name)
		}
	}
	if check != nil {
		check(t, rep, docs)
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
