package lifecycle

import (
	"fmt"
	"math"
	"strings"
	"time"

	"github.com/shoal-run/shoal/internal/bench"
	"github.com/shoal-run/shoal/internal/bench/kit"
)

// Targets the lifecycle suite checks shoal against.
const (
	targetVsRunc   = 1.3  // shoal run / bare runc run, at most
	targetVsPodman = 0.33 // shoal run / podman run, below
)

// Result returns the result of the subject with key, or nil.
func (r *report) Result(key string) *Result {
	for _, res := range r.Results {
		if res.Key == key {
			return res
		}
	}
	return nil
}

func (r *report) ratio(a, b string) float64 {
	ra, rb := r.Result(a), r.Result(b)
	if !ra.OK() || !rb.OK() {
		return math.NaN()
	}
	return bench.Ratio(ra.Summary(kit.PhaseTotal), rb.Summary(kit.PhaseTotal))
}

// Ratios returns the two headline ratios of medians: shoal run (network
// none) over bare runc run, and over podman run.
func (r *report) Ratios() (vsRunc, vsPodman float64) {
	return r.ratio(keyShoalRunNone, keyRuncRun), r.ratio(keyShoalRunNone, keyPodmanRun)
}

// renderLifecycle writes the lifecycle suite's tables, plots and
// paragraphs into the report.
func (r *report) renderLifecycle() {
	var b strings.Builder
	p := func(format string, a ...any) { fmt.Fprintf(&b, format, a...) }
	p("%d recorded runs of each subject after %d warm-up run(s), "+
		"interleaved (A, B, C, A, B, C, ...) so that drift on the host touches every subject alike. "+
		"Every subject runs `/bin/true` in the same busybox root file system "+
		"(a static busybox and applet links), read-only. In commands, DIR is that folder, B a bundle "+
		"made by `runc spec` (no terminal, args `/bin/true`, read-only root, root path DIR) and ID a "+
		"fresh container ID.\n\n", r.Runs, r.Warmup)

	p("### End to end\n\n")
	p("Command: `%s`. Times in ms; the last column is the ratio of medians to bare `runc run`.\n\n", r.Command)
	p("| subject | exact command | median | p90 | p99 | min | max | stddev | vs runc run |\n")
	p("|---|---|---:|---:|---:|---:|---:|---:|---:|\n")
	base := r.Result(keyRuncRun)
	for _, k := range []string{keyShoalRunNone, keyShoalRunBridge, keyRuncRun, keyRuncRunSeccomp, keyPodmanRun, keyPodmanCrun, keyAPIRun, keyShoalVersion, keyShoalPs} {
		res := r.Result(k)
		if res == nil {
			continue
		}
		if !res.OK() {
			p("| %s | `%s` | not run: %s ||||||| \n", res.Name, res.Command, bench.OneLine(res.Err))
			continue
		}
		s := res.Summary(kit.PhaseTotal)
		ratio := math.NaN()
		if base.OK() {
			ratio = bench.Ratio(s, base.Summary(kit.PhaseTotal))
		}
		p("| %s | `%s` | %s | %s | %s | %s | %s | %s | %s |\n", res.Name, res.Command,
			bench.FormatMS(s.Median), bench.FormatMS(s.P90), bench.FormatMS(s.P99), bench.FormatMS(s.Min), bench.FormatMS(s.Max), bench.FormatMS(s.Stddev), bench.FormatRatio(ratio))
	}
	p("\npodman runs the container with runc and these flags because on a host with cgroup v1+v2 hybrid " +
		"mounts crun refuses to start (see the podman (crun) row), podman's default open-files limit " +
		"(1048576) can exceed the host's hard limit, and without systemd cgroups are managed through " +
		"cgroupfs. It gets the same read-only root file system as the others, from its own copy of the " +
		"folder because podman writes /etc/hosts and friends into it.\n\n")

	vsRunc, vsPodman := r.Ratios()
	p("### Targets\n\nCommand: `%s`. Ratios of medians, `shoal run --rm` with network none.\n\n", r.Command)
	p("| ratio | target | measured | verdict |\n|---|---|---:|---|\n")
	p("| shoal run / bare runc run | ≤ %.2f× | %s | %s |\n", targetVsRunc, bench.FormatRatio(vsRunc), bench.Verdict(vsRunc, func(v float64) bool { return v <= targetVsRunc }))
	p("| shoal run / podman run | < %.2f× | %s | %s |\n", targetVsPodman, bench.FormatRatio(vsPodman), bench.Verdict(vsPodman, func(v float64) bool { return v < targetVsPodman }))
	p("| shoal run --network bridge / bare runc run | (none) | %s | |\n", bench.FormatRatio(r.ratio(keyShoalRunBridge, keyRuncRun)))
	p("| shoal run / bare runc run with shoal's seccomp allowlist | (none) | %s | |\n\n", bench.FormatRatio(r.ratio(keyShoalRunNone, keyRuncRunSeccomp)))
	p("The target compares with `runc spec`'s default bundle, which has no seccomp filter; shoal's " +
		"containers carry a deny-by-default allowlist of about 360 syscalls, which runc compiles on " +
		"every start. The last row compares with runc doing that same work.\n\n")

	p("### Phase split\n\n")
	p("Command: `%s`. Median (p99) in ms of each phase. *net*: a network namespace from shoal's pool; "+
		"*create*: bundle, overlay mount and `runc create` (for Run: `runc run --detach`, which also starts); "+
		"*start*: `runc start` until it returns; *exec*: from then until `/bin/true` has ended; "+
		"*delete*: runtime state, mount, cgroups, bundle and namespace removed.\n\n", r.Command)
	phases := []string{kit.PhaseNet, kit.PhaseCreate, kit.PhaseStart, kit.PhaseExec, kit.PhaseDelete, kit.PhaseTotal}
	p("| subject | calls | %s |\n|---|---|%s\n", strings.Join(phases, " | "), strings.Repeat("---:|", len(phases)))
	for _, k := range []string{keyAPISplitNone, keyAPISplitBridge, keyAPISplitCrun, keyAPIRun, keyRuncSplit} {
		res := r.Result(k)
		if res == nil {
			continue
		}
		if !res.OK() {
			p("| %s | %s | not run: %s |%s\n", res.Name, res.Command, bench.OneLine(res.Err), strings.Repeat("|", len(phases)-1))
			continue
		}
		cells := make([]string, len(phases))
		for i, ph := range phases {
			cells[i] = "–"
			if s := res.Summary(ph); s.N > 0 {
				cells[i] = fmt.Sprintf("%s (%s)", bench.FormatMS(s.Median), bench.FormatMS(s.P99))
			}
		}
		p("| %s | %s | %s |\n", res.Name, res.Command, strings.Join(cells, " | "))
	}
	p("\n")
	r.Markdown(b.String())
	bar, line := r.lifecycleCharts()
	r.Plot("lifecycle-phases.svg", "lifecycle phases", bar)
	r.Plot("lifecycle-samples.svg", "lifecycle samples", line)
	b.Reset()
	r.profileMarkdown(&b)
	r.Markdown(b.String())
}

// lifecycleCharts draws the phase bars and the per-run lines.
func (r *report) lifecycleCharts() (bar, line []byte) {
	groups := []string{"create", "start", "exec", "delete", "run --rm, end to end"}
	series := []string{"shoal", "bare runc", "podman"}
	med := func(key, phase string) float64 {
		res := r.Result(key)
		if !res.OK() {
			return math.NaN()
		}
		s := res.Summary(phase)
		if s.N == 0 {
			return math.NaN()
		}
		return float64(s.Median) / float64(time.Millisecond)
	}
	values := make([][]float64, len(groups))
	for g, ph := range []string{kit.PhaseCreate, kit.PhaseStart, kit.PhaseExec, kit.PhaseDelete} {
		values[g] = []float64{med(keyAPISplitNone, ph), med(keyRuncSplit, ph), math.NaN()}
	}
	values[4] = []float64{med(keyShoalRunNone, kit.PhaseTotal), med(keyRuncRun, kit.PhaseTotal), med(keyPodmanRun, kit.PhaseTotal)}
	bar = bench.BarChart("Container lifecycle, median ms (shoal: runtime API split and shoal run)", groups, series, values)

	keys := []string{keyShoalRunNone, keyShoalRunBridge, keyRuncRun, keyPodmanRun}
	var names []string
	var ys [][]float64
	xs := make([]float64, r.Runs)
	for i := range xs {
		xs[i] = float64(i + 1)
	}
	for _, k := range keys {
		res := r.Result(k)
		if res == nil {
			continue
		}
		row := make([]float64, r.Runs)
		for i := range row {
			row[i] = math.NaN()
			if i < len(res.Samples[kit.PhaseTotal]) {
				row[i] = float64(res.Samples[kit.PhaseTotal][i]) / float64(time.Millisecond)
			}
		}
		names = append(names, res.Name)
		ys = append(ys, row)
	}
	line = bench.LineChart("End to end, every run (ms)", "run", "ms", names, xs, ys)
	return bar, line
}

// medianOf returns the median of samples, 0 for none.
func medianOf(d []time.Duration) time.Duration { return bench.Summarize(d).Median }
