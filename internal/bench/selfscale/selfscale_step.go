package selfscale

import (
	"context"
	"fmt"
	"math"
	"strings"
	"sync"
	"time"

	"github.com/shoal-run/shoal/internal/api/types"
	"github.com/shoal-run/shoal/internal/bench"
	"github.com/shoal-run/shoal/internal/bench/kit"
)

// Row names of the selfscale step table.
const (
	ssStep2    = "2nd ready replica after the step up"
	ssStepPeak = "peak replica count reached after the step up"
	ssStepBack = "back to one replica after the step down"
)

// selfscaleToml is the selfscale example with thresholds the step crosses.
const selfscaleToml = `image = "selfscale:1"
[scale]
min = 1
max = 4
target_concurrency = 100
idle_timeout = "1m"
[health]
http = "/healthz"
[env]
HIGH_RPS = "150"
LOW_RPS = "20"
COOLDOWN = "2s"
`

// pacedLoad sends GET / to an app from workers whose number and pace
// change with the phase; every request is recorded.
type pacedLoad struct {
	e    *env
	app  string
	mu   sync.Mutex
	recs []kit.ReqRecord
	wg   sync.WaitGroup
}

// run sends requests from n workers, each waiting pace between requests,
// until the deadline.
func (g *pacedLoad) run(ctx context.Context, n int, pace time.Duration, until time.Time) {
	for i := 0; i < n; i++ {
		g.wg.Add(1)
		go func() {
			defer g.wg.Done()
			for k := 0; k < 1_000_000 && time.Now().Before(until) && ctx.Err() == nil; k++ {
				rctx, cancel := context.WithTimeout(ctx, 10*time.Second)
				t0 := time.Now()
				_, _, body, err := g.e.Request(rctx, g.app, "/")
				cancel()
				rec := kit.ReqRecord{Start: t0, End: time.Now(), OK: err == nil, Replica: strings.TrimSpace(body)}
				g.mu.Lock()
				g.recs = append(g.recs, rec)
				g.mu.Unlock()
				if pace > 0 {
					time.Sleep(pace)
				}
			}
		}()
	}
}

// selfscaleStep runs the selfscale example through a low load, a step up
// and a step back down, and plots the load, the replicas and the latency.
func (e *env) selfscaleStep(ctx context.Context, rep *bench.Report) error {
	rep.Heading("The selfscale example under a load step")
	lowFor, highFor, afterFor := 5*time.Second, 20*time.Second, 25*time.Second
	if e.Opts.Quick {
		lowFor, highFor, afterFor = 2*time.Second, 8*time.Second, 12*time.Second
	}
	const app, highClients = "selfscale", 8
	bench.Settle(ctx, bench.SettleIdle, bench.SettleWindow, 2*time.Second)
	if err := e.Deploy(ctx, app, selfscaleToml); err != nil {
		return err
	}
	defer e.Remove(context.WithoutCancel(ctx), app)
	if err := e.WaitFor(ctx, app, 30*time.Second, "ready", func(a types.App) bool { return a.Ready == 1 }); err != nil {
		return err
	}
	begin := time.Now()
	up, down, end := begin.Add(lowFor), begin.Add(lowFor+highFor), begin.Add(lowFor+highFor+afterFor)
	g := &pacedLoad{e: e, app: app}
	// About 10 requests a second before and after the step (below the
	// example's LOW_RPS), as fast as 8 clients go during it.
	g.run(ctx, 1, 100*time.Millisecond, end)
	type sample struct {
		t            time.Time
		ready, other int
	}
	var samples []sample
	sampled := make(chan struct{})
	go func() {
		defer close(sampled)
		tick := time.NewTicker(100 * time.Millisecond)
		defer tick.Stop()
		for time.Now().Before(end) && ctx.Err() == nil {
			if a, err := e.Status(ctx, app); err == nil {
				samples = append(samples, sample{time.Now(), a.Ready, len(a.Replicas) - a.Ready})
			}
			<-tick.C
		}
	}()
	sleepUntil(ctx, up)
	g.run(ctx, highClients, 0, down)
	g.wg.Wait()
	<-sampled
	if err := ctx.Err(); err != nil {
		return err
	}

	// Times from the samples of the status API.
	var to2, toPeak, back float64 = math.NaN(), math.NaN(), math.NaN()
	peak := 0
	for _, s := range samples {
		if s.t.After(up) && s.t.Before(down) && s.ready > peak {
			peak, toPeak = s.ready, bench.Millis(s.t.Sub(up))[0]
		}
		if s.t.After(up) && s.ready >= 2 && math.IsNaN(to2) {
			to2 = bench.Millis(s.t.Sub(up))[0]
		}
	}
	for _, s := range samples {
		if s.t.After(down) && s.ready == 1 && s.other == 0 {
			back = bench.Millis(s.t.Sub(down))[0]
			break
		}
	}
	failed := 0
	for _, r := range g.recs {
		if !r.OK {
			failed++
		}
	}
	e.Fail("selfscale step", failed)
	row := func(name string, v float64, why, how string) bench.Row {
		cmd := "GET /v1/apps/" + app + " every 100 ms during the run: " + how
		if math.IsNaN(v) {
			return bench.Row{Name: name, Command: cmd, Err: why}
		}
		return bench.Row{Name: name, Command: cmd, Values: []float64{v}}
	}
	tab := bench.Table{Title: "The selfscale example scaling itself", Unit: "ms",
		Command: fmt.Sprintf("in-process load: 1 client at 10 requests/s for %s, then %d more clients without pause for %s, then the 1 client alone for %s; GET / through the proxy",
			lowFor, highClients, highFor, afterFor),
		Note: "selfscale with `min = 1`, `max = 4`, `HIGH_RPS = 150`, `LOW_RPS = 20`, `COOLDOWN = 2s`: each replica counts its own requests per second, " +
			"calls replicate above 150 and halt then die below 20 (never as the last serving replica). Times are read from the status API, polled every 100 ms; one run.",
		Rows: []bench.Row{
			row(ssStep2, to2, "no second replica became ready during the step", "the first sample after the step up with 2 ready replicas"),
			row(ssStepPeak, toPeak, "no replica count above one during the step", "the first sample of the step with its highest ready count"),
			row(ssStepBack, back, fmt.Sprintf("not back to one replica within %s of the step down", afterFor),
				"the first sample after the step down with one replica listed, ready"),
		}}
	rep.Table(tab)
	e.Tables = append(e.Tables, tab)

	// Series every 250 ms, x in seconds since the step up.
	const bin = 250 * time.Millisecond
	bins := int(end.Sub(begin) / bin)
	lat := make([][]float64, bins)
	for _, r := range g.recs {
		if b := int(r.End.Sub(begin) / bin); r.OK && b >= 0 && b < bins {
			lat[b] = append(lat[b], bench.Millis(r.End.Sub(r.Start))[0])
		}
	}
	var xs, load, ready, p50, p99 []float64
	si, last := 0, math.NaN()
	for b := 0; b < bins; b++ {
		to := begin.Add(time.Duration(b+1) * bin)
		for si < len(samples) && !samples[si].t.After(to) {
			last = float64(samples[si].ready)
			si++
		}
		xs = append(xs, to.Sub(up).Seconds())
		load = append(load, float64(len(lat[b]))/bin.Seconds())
		ready = append(ready, last)
		m, p := math.NaN(), math.NaN()
		if len(lat[b]) > 0 {
			st := bench.Stats(lat[b])
			m, p = st.Median, st.P99
		}
		p50, p99 = append(p50, m), append(p99, p)
	}
	rep.Plot("selfscale-load.svg", "requests per second answered during the selfscale step", bench.LineChart(
		"Load: requests answered per second (250 ms bins)", "s since the step up", "requests/s", []string{"answered"}, xs, [][]float64{load}))
	rep.Plot("selfscale-replicas.svg", "ready replicas of selfscale during the step", bench.LineChart(
		"Ready replicas (status API)", "s since the step up", "replicas", []string{"ready"}, xs, [][]float64{ready}))
	rep.Plot("selfscale-latency.svg", "latency during the selfscale step", bench.LineChart(
		"Latency of requests finishing in each 250 ms", "s since the step up", "ms", []string{"p50", "p99"}, xs, [][]float64{p50, p99}))

	var evs []types.Event
	calls := map[string]int{}
	if err := e.GetJSON(ctx, "/v1/events?app="+app, &evs); err == nil {
		for _, ev := range evs {
			call, _, _ := strings.Cut(ev.Reason, ":")
			switch ev.Kind {
			case "self":
				calls[call]++
			case "self-refused":
				calls[call+" refused"]++
			}
		}
	}
	rep.Para("The app reached %d ready replicas during the step (the 2nd %s ms after it) and was back to one replica %s ms after the load fell; "+
		"it called replicate %d times (%d refused at max) and die %d times. %d of %d requests failed (target 0: %s).",
		peak, bench.FormatValue(to2), bench.FormatValue(back), calls["replicate"], calls["replicate refused"], calls["die"],
		failed, len(g.recs), bench.Verdict(float64(failed), func(v float64) bool { return v == 0 }))
	return nil
}

// sleepUntil waits until t or the end of ctx.
func sleepUntil(ctx context.Context, t time.Time) {
	select {
	case <-ctx.Done():
	case <-time.After(time.Until(t)):
	}
}

// selfscaleSummary adds the targets with their verdicts.
func (e *env) selfscaleSummary(rep *bench.Report) {
	rep.Heading("Targets")
	rt := e.Table("Replicate to a second ready replica")
	th := rt.Row(ssThaw)
	p50, p99 := math.NaN(), math.NaN()
	if th.OK() {
		p50, p99 = th.Stats().Median, th.Stats().P99
	}
	failed := 0
	for _, n := range e.Failures {
		failed += n
	}
	var b strings.Builder
	b.WriteString("| target | goal | measured | verdict |\n|---|---|---|---|\n")
	line := func(what, goal string, v float64, unit string, ok func(float64) bool) {
		fmt.Fprintf(&b, "| %s | %s | %s %s | %s |\n", what, goal, bench.FormatValue(v), unit, bench.Verdict(v, ok))
	}
	le := func(x float64) func(float64) bool { return func(v float64) bool { return v <= x } }
	line("replicate → second ready replica, a frozen one available, p50", "≤ 100 ms", p50, "ms", le(100))
	line("replicate → second ready replica, a frozen one available, p99", "≤ 100 ms", p99, "ms", le(100))
	cold := rt.Median(ssCold)
	line("replicate → second ready replica, none frozen (median)", fmt.Sprintf("≤ a cold start (%s ms), within 10 %% or 5 ms", bench.FormatValue(cold)),
		rt.Median(ssStart), "ms", le(math.Max(cold*1.1, cold+5)))
	line("failed requests through replicate, halt and die", "0", float64(failed), "", func(v float64) bool { return v == 0 })
	rep.Markdown(b.String())
}
