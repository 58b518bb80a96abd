package fastcontainer

import (
	"fmt"
	"math"
	"slices"
	"strings"

	"github.com/shoal-run/shoal/internal/bench"
)

// Row names of the latency table.
const (
	rOne       = "one container at 0.3 cores, the whole run"
	rUpBefore  = "scale-up run: before the quota was raised"
	rUpAfter   = "scale-up run: after the quota was raised"
	rOutBefore = "scale-up and scale-out run: before either took effect"
	rOutUp     = "scale-up and scale-out run: quota raised, one container"
	rOutAfter  = "scale-up and scale-out run: after the 2nd container was ready"
)

// Row names of the reaction table.
const (
	rxUp      = "scale-up run: quota raised"
	rxOutUp   = "scale-up and scale-out run: quota raised"
	rxOutDec  = "scale-up and scale-out run: scale-out decided"
	rxOutDone = "scale-up and scale-out run: 2nd container ready"
)

// Titles of the tables.
const (
	tLatency  = "Latency in windows of the runs"
	tReaction = "Reactions, from the start of the load"
)

// analysed is a run with what shoal did in it.
type analysed struct {
	result
	rx reaction
}

// render adds the suite's tables, plots and text for its runs: the
// reference run, the scale-up run and the scale-up and scale-out run, in
// that order.
func render(rep *bench.Report, results []result) {
	runs := map[string]analysed{}
	for _, r := range results {
		runs[r.spec.app] = analysed{r, analyze(r.launch, r.ab.Took, r.events, r.samples, r.spec.maxCPU)}
	}
	one, up, out := runs["fc-one"], runs["fc-up"], runs["fc-out"]

	rep.Para("FastContainer (a homeostatic, reactive and mortal architecture for web hosting), experiment 1: Apache with PHP's `phpinfo()` in a container limited to 30 %% of one "+
		"core, `ab` with %d concurrent connections; the platform raised the CPU limit to 60 %% (scale-up) or started a second container "+
		"(scale-out) once throttling had stayed at or above 80 %% for 5 minutes (at 50,000 of 100,000 requests). Here the same stack comes "+
		"from Debian bookworm's packages (`scripts/debian-images.sh apache-php`: apache2 and libapache2-mod-php, their stock configuration, "+
		"a `phpinfo()` page), deployed by the real `shoal daemon` with examples/debian/apache-php/shoal.toml's settings but the paper's CPU "+
		"(`cpu = 0.3`, `max_cpu` 0.3 or 0.6, `min = 1`, `max` 1 or 2, the default `target_concurrency = 10`), and loaded with `ab -c %d` "+
		"through shoal's proxy (Host: `<app>.localhost`), a new connection per request. shoal's autoscaler decides both actions itself, "+
		"from the load's start: each run is a fresh deployment whose one replica has answered one request before ab starts.",
		concurrency, concurrency)

	// Latency in windows.
	row := func(r analysed, name string, from, to float64, why string) bench.Row {
		w := bench.Row{Name: name, Command: r.ab.Command, Baseline: rOne}
		switch {
		case why != "":
			w.Err = why
		default:
			w.Values = between(r.ab, r.launch, from, to)
			if len(w.Values) == 0 {
				w.Err = fmt.Sprintf("no request started wholly inside %s–%s s (ab stamps starts in whole seconds)", bench.FormatValue(from), bench.FormatValue(to))
			}
		}
		return w
	}
	inf := math.Inf(1)
	effect := firstOf(out.rx.up, out.rx.ready)
	upWhy, readyWhy, outUpWhy := "", "", ""
	if math.IsNaN(up.rx.up) {
		upWhy = "the quota was not raised during the run"
	}
	if math.IsNaN(out.rx.ready) {
		readyWhy = "no 2nd container was ready during the run"
	}
	if math.IsNaN(out.rx.up) || !(math.IsNaN(out.rx.ready) || out.rx.up < out.rx.ready) {
		outUpWhy = "the 2nd container was ready before any quota was raised"
		if math.IsNaN(out.rx.up) {
			outUpWhy = "the quota was not raised during the run"
		}
	}
	lat := bench.Table{Title: tLatency, Unit: "ms", Baseline: rOne,
		Note: "ab's total time per request (`-g`), by the window its start falls in. ab stamps starts in whole seconds, so a request " +
			"counts in a window only when its whole second does: a window shorter than a second may hold none. The quota and the " +
			"replica count come from the daemon's events and its status API (polled every 100 ms).",
		Rows: []bench.Row{
			row(one, rOne, 0, inf, ""),
			row(up, rUpBefore, 0, firstOf(up.rx.up, inf), ""),
			row(up, rUpAfter, up.rx.up, inf, upWhy),
			row(out, rOutBefore, 0, firstOf(effect, inf), ""),
			row(out, rOutUp, out.rx.up, firstOf(out.rx.ready, inf), outUpWhy),
			row(out, rOutAfter, out.rx.ready, inf, readyWhy),
		}}
	rep.Table(lat)

	// Reactions.
	rx := func(name string, v float64, cmd, why string) bench.Row {
		if math.IsNaN(v) {
			return bench.Row{Name: name, Command: cmd, Err: why}
		}
		return bench.Row{Name: name, Command: cmd, Values: []float64{v}}
	}
	const cpuCmd, scaleCmd, readyCmd = "the first cpu event raising a quota (GET /v1/events?app=APP)",
		"the first scale event to more replicas (GET /v1/events?app=APP)", "the first status sample with 2 ready replicas (GET /v1/apps/APP every 100 ms)"
	rt := bench.Table{Title: tReaction, Unit: "s",
		Note: "Seconds from ab's start to the daemon's event or status sample, one run each.",
		Rows: []bench.Row{
			rx(rxUp, up.rx.up, cpuCmd, upWhy),
			rx(rxOutUp, out.rx.up, cpuCmd, "the quota was not raised during the run"),
			rx(rxOutDec, out.rx.out, scaleCmd, "no scale-out was decided during the run"),
			rx(rxOutDone, out.rx.ready, readyCmd, readyWhy),
		}}
	rep.Table(rt)

	renderRuns(rep, []analysed{one, up, out})
	renderPaper(rep, lat, one, up, out)
	renderQuota(rep, up, out)
	renderPlots(rep, one, up, out)
}

// renderRuns adds a table of the runs' counts, rates and CPU.
func renderRuns(rep *bench.Report, runs []analysed) {
	var b strings.Builder
	b.WriteString("#### The runs\n\n| run | ab | complete | failed | run time | requests/s | CPU used | throttled periods | pinned to CPUs | quota raised / lowered | ready replicas' samples at `max_cpu` |\n" +
		"|---|---|---|---|---|---|---|---|---|---|---|\n")
	for _, r := range runs {
		held := "–"
		if r.spec.maxCPU > baseCPU && !math.IsNaN(r.rx.held) {
			held = fmt.Sprintf("%.0f %%", 100*r.rx.held)
		}
		rate := math.NaN()
		if r.ab.Took > 0 {
			rate = float64(r.ab.Complete) / r.ab.Took
		}
		used, thr := "n/a: "+r.cpuErr, "n/a"
		if r.cpuErr == "" {
			used = bench.FormatValue(cores(r)) + " cores"
			thr = fmt.Sprintf("%s %% of %d", bench.FormatValue(100*throttled(r)), r.cpu.periods)
		}
		fmt.Fprintf(&b, "| %s | `%s` | %d of %d | %d | %s s | %s | %s | %s | %s | %d / %d | %s |\n", r.spec.what, r.ab.Command, r.ab.Complete, asked(r.result),
			failed(r.result), bench.FormatValue(r.ab.Took), bench.FormatValue(rate), used, thr, strings.Join(r.cpusets, ", "), r.rx.ups, r.rx.downs, held)
	}
	b.WriteString("\n*Failed* counts ab's failed requests but those it calls \"Length\" (phpinfo()'s page differs in length from one request to the next), " +
		"non-2xx answers, and requests ab did not complete within its time limit. *CPU used* is the replicas' CPU time during the load (their cgroups' " +
		"cpuacct) over its length, summed over the replicas; *throttled periods* the share of the CFS periods in which they ran that ended at their quota " +
		"(cpu.stat), the figure the scale-up rule judges (at or above 80 %: raise). The CPUs are those each replica was pinned to at the end.")
	if slices.ContainsFunc(runs, func(r analysed) bool { return r.spec.timed }) {
		fmt.Fprintf(&b, " The scale-out run's load is timed (quick mode): it ends %s s after the 2nd container was ready, its `-n` only a cap, "+
			"so that requests start after the scale-out however fast the replies come.", bench.FormatValue(quickTail.Seconds()))
	}
	b.WriteString("\n\n")
	rep.Markdown(b.String())
}

// cores is the replicas' mean CPU use during a run's load, in cores.
func cores(r analysed) float64 {
	if r.ab.Took <= 0 {
		return math.NaN()
	}
	return r.cpu.usage / r.ab.Took
}

// throttled is the share of the replicas' CFS periods that hit the quota.
func throttled(r analysed) float64 {
	if r.cpu.periods == 0 {
		return math.NaN()
	}
	return float64(r.cpu.throttled) / float64(r.cpu.periods)
}

// renderPaper adds the paper's figures beside this run's.
func renderPaper(rep *bench.Report, lat bench.Table, one, up, out analysed) {
	ms := func(name string) string {
		w := lat.Row(name)
		if !w.OK() {
			return "not measured: " + w.Err
		}
		st := w.Stats()
		return fmt.Sprintf("median %s ms, p99 %s ms, max %s ms", bench.FormatValue(st.Median), bench.FormatValue(st.P99), bench.FormatValue(st.Max))
	}
	s := func(v float64) string {
		if math.IsNaN(v) {
			return "not during the run"
		}
		return bench.FormatValue(v) + " s"
	}
	var b strings.Builder
	b.WriteString("#### Beside the paper\n\n| figure | FastContainer (paper) | shoal (this run) |\n|---|---|---|\n")
	fmt.Fprintf(&b, "| one container, time per request | ~700 ms | %s |\n", ms(rOne))
	fmt.Fprintf(&b, "| one container, whole run | 100,000 requests in ~720 s | %d requests in %s |\n", one.ab.Complete, s(one.ab.Took))
	fmt.Fprintf(&b, "| scale-up decided (30 %% → 60 %% of a core) | 301 s into the run (the rule judges 5 min of throttling; set to act at 50,000 requests) | %s (scale-up run); %s (with scale-out) |\n",
		s(up.rx.up), s(out.rx.up))
	fmt.Fprintf(&b, "| time per request after scale-up | 574 ms 1 s later, 358 ms 3 s later, then ~350 ms | %s |\n", ms(rUpAfter))
	fmt.Fprintf(&b, "| scale-out decided (1 → 2 containers) | 335 s into the run | %s |\n", s(out.rx.out))
	fmt.Fprintf(&b, "| 2nd container ready | 340 s (5 s after the decision) | %s |\n", s(out.rx.ready))
	fmt.Fprintf(&b, "| time per request after scale-out | 100–400 ms | %s |\n", ms(rOutAfter))
	fmt.Fprintf(&b, "| whole run with scale-out | ~470 s (100,000 requests) | %d requests in %s |\n", out.ab.Complete, s(out.ab.Took))
	fmt.Fprintf(&b, "| failed requests | not reported | %d of %d, %d of %d, %d of %d (the three runs) |\n\n",
		failed(one.result), asked(one.result), failed(up.result), asked(up.result), failed(out.result), asked(out.result))
	rep.Markdown(b.String())
	rep.Para("The paper's times are set by its rule (throttling over 5 minutes) and its choice to scale at half the requests; shoal's are its " +
		"autoscaler's reaction from the first request, so the two columns compare mechanisms, not hardware. The paper ran 100,000 requests " +
		"a run; these runs are shorter (the table of runs gives their sizes), long enough for the latency to settle after each action.")
}

// renderQuota says how the CPU quota behaved during the runs that may
// raise it: the rule is measured here, not tuned.
func renderQuota(rep *bench.Report, up, out analysed) {
	var b strings.Builder
	for _, r := range []analysed{up, out} {
		if b.Len() > 0 {
			b.WriteString(" ")
		}
		held := "n/a"
		if !math.IsNaN(r.rx.held) {
			held = fmt.Sprintf("%.0f %%", 100*r.rx.held)
		}
		fmt.Fprintf(&b, "In the %s run the autoscaler made %d quota raises and %d quota reductions during the load; the ready replicas "+
			"were at %s cores in %s of the status samples", strings.SplitN(r.spec.what, ":", 2)[0], r.rx.ups, r.rx.downs,
			bench.FormatValue(r.spec.maxCPU), held)
		if r.cpuErr == "" {
			fmt.Fprintf(&b, "; the replicas used %s cores on average and were throttled in %s %% of their CFS periods",
				bench.FormatValue(cores(r)), bench.FormatValue(100*throttled(r)))
		}
		b.WriteString(".")
	}
	if up.rx.ups == 0 {
		b.WriteString(" In the scale-up run the quota was never raised: the rule raises it when a replica is throttled in at least 80 % of its periods, " +
			"or has 2 or more requests in flight while it uses at least 90 % of its quota or (where its cgroup tells) waits for a CPU half the time")
		if up.cpuErr == "" && throttled(up) < 0.8 {
			fmt.Fprintf(&b, ", and the replica was throttled in %s %% while it used %s of its %s cores with up to %d requests in flight: "+
				"a replica that waits for a CPU the host's other work holds is not throttled and cannot use its quota, however busy it is",
				bench.FormatValue(100*throttled(up)), bench.FormatValue(cores(up)), bench.FormatValue(baseCPU), concurrency)
		}
		b.WriteString(". The paper's rule judged throttling only, over 5 minutes on its own host.")
	}
	if up.rx.downs > 0 || out.rx.downs > 0 {
		b.WriteString(" A raised quota was lowered while the load lasted: the rule lowers it when a replica is throttled in under 10 % of its " +
			"periods and has shown no demand (throttling, 2 or more requests in flight) for 10 s " +
			"(the paper's platform judged 5 minutes of throttling and kept the raised limit).")
	}
	b.WriteString(" This is shoal's behaviour, measured as it is, not tuned away.")
	rep.Para("%s", b.String())
}

// renderPlots draws the latency and the quota per second of the runs.
func renderPlots(rep *bench.Report, one, up, out analysed) {
	secs := 0
	for _, r := range []analysed{one, up, out} {
		if n := len(r.ab.Starts); n > 0 {
			secs = max(secs, int(r.ab.Starts[n-1])+1)
		}
	}
	if secs == 0 {
		return
	}
	xs, oneMean, _ := one.ab.PerSecond(secs)
	_, upMean, _ := up.ab.PerSecond(secs)
	_, outMean, _ := out.ab.PerSecond(secs)
	rep.Plot("fastcontainer-latency.svg", "mean time per request each second of the three runs", bench.LineChart(
		"Mean time per request, by the second it started", "s since ab started", "ms",
		[]string{"one container, 0.3 cores", "scale-up", "scale-up and scale-out"}, xs, [][]float64{oneMean, upMean, outMean}))
	upQuota, _ := quotaPerSecond(up.launch, up.samples, secs)
	outQuota, outReady := quotaPerSecond(out.launch, out.samples, secs)
	rep.Plot("fastcontainer-quota.svg", "CPU quota and ready replicas each second", bench.LineChart(
		"CPU quota (mean of the ready replicas) and ready replicas", "s since ab started", "cores / replicas",
		[]string{"scale-up run: quota", "scale-up and scale-out run: quota", "scale-up and scale-out run: ready replicas"},
		xs, [][]float64{upQuota, outQuota, outReady}))
}
