package serving

import (
	"fmt"
	"math"
	"strings"
	"time"

	"github.com/shoal-run/shoal/internal/bench"
	"github.com/shoal-run/shoal/internal/bench/kit"
)

// Row names of the ab table.
const (
	svOutBefore = "1 replica at 0.3 cores (before scale-out)"
	svOutAfter  = "2 replicas at 0.3 cores (after scale-out)"
	svUpAfter   = "1 replica, quota raised (after scale-up)"
)

// renderClassic adds the ab experiments' table, plots and text.
func (e *env) renderClassic(rep *bench.Report, out kit.ABRun, outSamples []kit.AppSample, scaledAt time.Time,
	up kit.ABRun, upSamples []kit.AppSample, cpuEvents, secs, conc int, path string) {
	since := func(r kit.ABRun, t time.Time) float64 { return t.Sub(r.Begin).Seconds() }
	// Scale-out: the command at tOut, the second replica ready at tReady.
	tOut := since(out, scaledAt)
	tReady := math.NaN()
	for _, s := range outSamples {
		if s.T.After(scaledAt) && s.Ready >= 2 {
			tReady = since(out, s.T)
			break
		}
	}
	// Scale-up: the first sample whose ready replica has more than the
	// starting quota.
	startCPU, tUp, upCPU := math.NaN(), math.NaN(), math.NaN()
	for _, s := range upSamples {
		if math.IsNaN(startCPU) && !math.IsNaN(s.CPU) {
			startCPU = s.CPU
		}
		if !math.IsNaN(startCPU) && s.CPU > startCPU+1e-6 {
			tUp, upCPU = since(up, s.T), s.CPU
			break
		}
	}
	// ab records whole seconds: "before" is every second that ended
	// before the action, "after" every second that began after it took
	// effect.
	before := func(r kit.ABRun, action float64) []float64 { return r.Window(0, math.Floor(action)) }
	after := func(r kit.ABRun, effect float64) []float64 { return r.Window(math.Ceil(effect), float64(secs)+1) }
	endCPU := math.NaN()
	if n := len(upSamples); n > 0 {
		endCPU = upSamples[n-1].CPU
	}
	tab := bench.Table{Title: "Latency under ab, before and after", Unit: "ms", Baseline: svOutBefore,
		Command: out.Command,
		Note: fmt.Sprintf("cpuburn with `cpu = 0.3` (10 ms of CPU per request), %d concurrent ab clients for %d s per experiment, "+
			"a new connection per request; the values are ab's per-request total times (`-g`, which stamps each request's start "+
			"in whole seconds). *Before* holds the seconds that ended before the scale command; *after* the seconds that began "+
			"once the action took effect (the 2nd replica ready in the status API, or a raised quota seen there). The scale-up "+
			"app has `max_cpu = 0.6` and gets the same command (Host: burn-up.localhost); it starts like the scale-out app, one "+
			"replica at 0.3 cores, so both are compared with the same *before*.", conc, secs)}
	row := func(name string, values []float64, why string) bench.Row {
		w := bench.Row{Name: name, Command: "–", Values: values, Baseline: svOutBefore}
		if why != "" {
			w.Values, w.Err = nil, why
		} else if len(values) == 0 {
			w.Err = "no requests in the window"
		}
		return w
	}
	notYet := func(t float64) string {
		if math.IsNaN(t) {
			return "the action did not take effect within the run"
		}
		return ""
	}
	tab.Rows = []bench.Row{
		row(svOutBefore, before(out, tOut), ""),
		row(svOutAfter, after(out, tReady), notYet(tReady)),
		row(svUpAfter, after(up, tUp), notYet(tUp)),
	}
	rep.Table(tab)
	e.Tables = append(e.Tables, tab)
	xs, mean, p99 := out.PerSecond(secs)
	rep.Plot("serving-scale-out.svg", "latency per second, scale-out from 1 to 2 replicas", bench.LineChart(
		fmt.Sprintf("Scale-out: latency per second (scale command at %.1f s)", tOut), "s", "ms", []string{"mean", "p99"}, xs, [][]float64{mean, p99}))
	xs, mean, p99 = up.PerSecond(secs)
	title := "Scale-up: latency per second (quota not raised)"
	if !math.IsNaN(tUp) {
		title = fmt.Sprintf("Scale-up: latency per second (quota raised at %.1f s)", tUp)
	}
	rep.Plot("serving-scale-up.svg", "latency per second, scale-up from 0.3 cores", bench.LineChart(title, "s", "ms", []string{"mean", "p99"}, xs, [][]float64{mean, p99}))
	rate := func(r kit.ABRun, from, to float64) float64 {
		if !(to > from) {
			return math.NaN()
		}
		return float64(len(r.Window(from, to))) / (to - from)
	}
	var b strings.Builder
	fmt.Fprintf(&b, "Scale-out: `shoal app scale burn-out --min 2 --max 2` ran %.1f s into the run", tOut)
	if math.IsNaN(tReady) {
		b.WriteString("; the second replica was not ready before the run ended. ")
	} else {
		fmt.Fprintf(&b, " and the second replica was ready at %.1f s; the median latency went from %s ms to %s ms (%s) and the rate "+
			"from %s to %s requests/s. ", tReady, bench.FormatValue(tab.Median(svOutBefore)), bench.FormatValue(tab.Median(svOutAfter)),
			bench.FormatRatio(tab.Ratio(svOutAfter, svOutBefore)), bench.FormatValue(rate(out, 0, math.Floor(tOut))), bench.FormatValue(rate(out, math.Ceil(tReady), float64(secs))))
	}
	if math.IsNaN(tUp) {
		fmt.Fprintf(&b, "Scale-up: the autoscaler did not raise the replica's quota from %s cores within the %d s run (%d `cpu` events), "+
			"so this run shows no scale-up.", bench.FormatValue(startCPU), secs, cpuEvents)
	} else {
		fmt.Fprintf(&b, "Scale-up: the autoscaler saw the replica throttled and raised its quota live from %s to %s cores %.1f s into "+
			"the run, %s cores at its end (%d `cpu` events); the median latency was %s ms against %s ms at 0.3 cores (%s) and the "+
			"rate %s requests/s.",
			bench.FormatValue(startCPU), bench.FormatValue(upCPU), tUp, bench.FormatValue(endCPU), cpuEvents, bench.FormatValue(tab.Median(svUpAfter)),
			bench.FormatValue(tab.Median(svOutBefore)), bench.FormatRatio(tab.Ratio(svUpAfter, svOutBefore)),
			bench.FormatValue(rate(up, math.Ceil(tUp), float64(secs))))
	}
	rep.Para("%s", b.String())
}

// summary adds the targets with their verdicts, the failed requests of
// every part, and published figures of other systems.
func (e *env) summary(rep *bench.Report) {
	rep.Heading("Targets")
	cold := e.Table("Cold start to first byte").Row(svColdHello)
	coldP50, coldP99 := math.NaN(), math.NaN()
	if cold.OK() {
		s := cold.Stats()
		coldP50, coldP99 = s.Median, s.P99
	}
	pre := e.Table("Cold start to first byte").Row(svPremadeHello)
	preP50, preP99 := math.NaN(), math.NaN()
	if pre.OK() {
		s := pre.Stats()
		preP50, preP99 = s.Median, s.P99
	}
	thaw := e.Table("Thaw to first byte, beside a warm request")
	tput := e.Table("Requests per second")
	step := e.Table("From the load step until new replicas serve")
	kept := e.Table("HTTPS requests per second, kept-alive connections")
	hs := e.Table("New TLS handshakes per second")
	type target struct {
		what, goal string
		v          float64
		unit       string
		ok         func(float64) bool
	}
	le := func(x float64) func(float64) bool { return func(v float64) bool { return v <= x } }
	failed := 0
	for _, n := range e.Failures {
		failed += n
	}
	targets := []target{
		{"hello cold start to first byte, p50", "≤ 100 ms", coldP50, "ms", le(100)},
		{"hello cold start to first byte, p99", "≤ 250 ms", coldP99, "ms", le(250)},
		{"hello cold start from a premade replica, p50", "≤ 10 ms", preP50, "ms", le(10)},
		{"hello cold start from a premade replica, p99", "≤ 25 ms", preP99, "ms", le(25)},
		{"thaw over a warm request (medians)", "≤ 5 ms", thaw.Median(svThawHello) - thaw.Median(svWarm), "ms", le(5)},
		{"slowboot from the frozen tier (median)", "≤ 20 ms (its boot: 1.5 s)", thaw.Median(svThawSlowboot), "ms", le(20)},
		{"proxy throughput over nginx's", "≥ 0.8×", tput.Ratio(svShoal, svNginx), "×", func(v float64) bool { return v >= 0.8 }},
		{"HTTPS requests per second over nginx's, kept-alive", "≥ 1.0×", kept.Ratio(svTLSShoal, svTLSNginx), "×", func(v float64) bool { return v >= 1 }},
		{"new TLS handshakes per second over nginx's", "≥ 1.0×", hs.Ratio(svTLSShoal, svTLSNginx), "×", func(v float64) bool { return v >= 1 }},
		{"2nd new replica serving after a load step (median)", "≤ 1 s", step.Median(svStep2), "ms", le(1000)},
		{"failed requests, all parts", "0", float64(failed), "", func(v float64) bool { return v == 0 }},
	}
	var b strings.Builder
	b.WriteString("| target | goal | measured | verdict |\n|---|---|---:|---|\n")
	for _, t := range targets {
		v := bench.FormatValue(t.v)
		if t.unit == "×" {
			v = bench.FormatRatio(t.v)
		} else if t.unit != "" && v != "n/a" {
			v += " " + t.unit
		} else if t.unit == "" {
			v = fmt.Sprintf("%.0f", t.v)
		}
		fmt.Fprintf(&b, "| %s | %s | %s | %s |\n", t.what, t.goal, v, bench.Verdict(t.v, t.ok))
	}
	b.WriteString("\n")
	rep.Markdown(b.String())
	var parts []string
	for _, p := range []string{"cold start and thaw", "proxy throughput", "HTTP/2 and gRPC", "HTTPS", "load step", "scale-out and scale-up"} {
		parts = append(parts, fmt.Sprintf("%s %d", p, e.Failures[p]))
	}
	rep.Para("Failed requests by part (errors, timeouts and answers other than 2xx): %s.", strings.Join(parts, ", "))
	rep.Para("For context, published figures of other systems, **not measured here**: Knative reports cold starts of 2–15 s " +
		"(a pod scheduled and started from zero); Fly.io reports about 300 ms to boot a stopped Machine; OpenFaaS scales from zero " +
		"by polling every 100 ms while it holds the requests. They come from other hardware and other workloads and are no " +
		"comparison of like with like.")
}

func nan() float64 { return math.NaN() }
