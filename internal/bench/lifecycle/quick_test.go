package lifecycle

import (
	"context"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	"github.com/shoal-run/shoal/internal/bench"
	"github.com/shoal-run/shoal/internal/bench/benchtest"
)

// TestQuick runs the suite for real in quick mode and checks its report.
func TestQuick(t *testing.T) {
	var got *report
	s := bench.Suite{Name: "lifecycle", Title: title, Run: func(ctx context.Context, o bench.Options) (*bench.Report, error) {
		r, err := run(ctx, o)
		got = r
		if r == nil {
			return nil, err
		}
		return r.Report, err
	}}
	benchtest.Quick(t, s, func(t *testing.T, _ *bench.Report, docs string) { checkQuickLifecycle(t, got, docs) })
}

// checkQuickLifecycle checks that the lifecycle report has numbers in every
// row that must have them.
func checkQuickLifecycle(t *testing.T, rep *report, docs string) {
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
		benchtest.WellFormed(t, raw)
	}
}
