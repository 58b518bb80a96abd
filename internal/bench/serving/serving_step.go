package serving

import (
	"context"
	"fmt"
	"math"
	"sort"
	"strings"
	"sync"
	"time"

	"github.com/shoal-run/shoal/internal/api/types"
	"github.com/shoal-run/shoal/internal/bench"
	"github.com/shoal-run/shoal/internal/bench/kit"
)

// Row names of the load-step table.
const (
	svStep1    = "1st new replica serves"
	svStep2    = "2nd new replica serves"
	svStepLast = "last new replica serves"
)

// loadGen runs clients that each send GET path to app through the proxy in
// a loop until stop, every request bounded in time.
type loadGen struct {
	e    *env
	app  string
	path string
	stop time.Time
	wg   sync.WaitGroup
	mu   sync.Mutex
	recs []kit.ReqRecord
}

// add starts n more clients; each sends at most maxPerClient requests.
func (g *loadGen) add(ctx context.Context, n, maxPerClient int) {
	for i := 0; i < n; i++ {
		g.wg.Add(1)
		go func() {
			defer g.wg.Done()
			for k := 0; k < maxPerClient && time.Now().Before(g.stop) && ctx.Err() == nil; k++ {
				rctx, cancel := context.WithTimeout(ctx, 10*time.Second)
				t0 := time.Now()
				_, _, body, err := g.e.Request(rctx, g.app, g.path)
				cancel()
				rec := kit.ReqRecord{Start: t0, End: time.Now(), OK: err == nil}
				if err == nil {
					rec.Replica = burnReplica(body)
				}
				g.mu.Lock()
				g.recs = append(g.recs, rec)
				g.mu.Unlock()
			}
		}()
	}
}

// burnReplica reads the replica name from cpuburn's answer, "cpuburn from
// NAME: ...".
func burnReplica(body string) string {
	rest, ok := strings.CutPrefix(body, "cpuburn from ")
	if !ok {
		return ""
	}
	name, _, _ := strings.Cut(rest, ":")
	return name
}

// stepRun is the outcome of one load step.
type stepRun struct {
	toNew  []float64 // ms from the step until each new replica answered, in order
	xs     []float64 // s since the step, every 100 ms
	ready  []float64 // ready replicas in the status API
	p99    []float64 // p99 ms of the requests that finished in the interval
	failed int
	total  int
}

// loadStep measures how fast new replicas serve after the load on cpuburn
// steps from one client to eight.
func (e *env) loadStep(ctx context.Context, rep *bench.Report) error {
	rep.Heading("Scale-out after a step in load")
	pre, post := 2*time.Second, 6*time.Second
	if e.Opts.Quick {
		pre, post = time.Second, 3*time.Second
	}
	const clients, maxReplicas = 8, 4
	runs := e.Opts.RunsOr(3, 1)
	var all []stepRun
	for i := 1; i <= runs; i++ {
		bench.Settle(ctx, bench.SettleIdle, bench.SettleWindow, 2*time.Second)
		e.Opts.Logf("load step: %d/%d", i, runs)
		r, err := e.stepOnce(ctx, fmt.Sprintf("burn-step-%d", i), pre, post, clients, maxReplicas)
		if err != nil {
			return err
		}
		all = append(all, r)
	}
	tab := bench.Table{Title: "From the load step until new replicas serve", Unit: "ms",
		Command: fmt.Sprintf("in-process load generator: 1 client for %s, then %d clients for %s, GET /?ms=20 through the proxy", pre, clients, post),
		Note: fmt.Sprintf("cpuburn with `target_concurrency = 1`, `min = 1`, `max = %d`, `cpu = 0.5`; every request burns 20 ms of CPU. "+
			"A replica serves when the first answer that names it arrives (cpuburn answers with its host name, the replica's ID). "+
			"One fresh app per run.", maxReplicas)}
	names := []string{svStep1, svStep2, svStepLast}
	for k, name := range names {
		row := bench.Row{Name: name}
		for _, r := range all {
			idx := k
			if name == svStepLast {
				idx = maxReplicas - 2
			}
			if idx < len(r.toNew) {
				row.Values = append(row.Values, r.toNew[idx])
			} else {
				row.Err = fmt.Sprintf("only %d new replicas served within %s of the step", len(r.toNew), post)
				row.Values = nil
				break
			}
		}
		tab.Rows = append(tab.Rows, row)
	}
	rep.Table(tab)
	e.Tables = append(e.Tables, tab)
	if len(all) > 0 {
		r := all[0]
		rep.Plot("serving-step-replicas.svg", "ready replicas after the load step", bench.LineChart(
			"Ready replicas (status API), first run", "s since the step", "replicas", []string{"ready replicas"}, r.xs, [][]float64{r.ready}))
		rep.Plot("serving-step-p99.svg", "p99 latency per 100 ms after the load step", bench.LineChart(
			"p99 latency of requests finishing in each 100 ms, first run", "s since the step", "ms", []string{"p99"}, r.xs, [][]float64{r.p99}))
	}
	failed, total := 0, 0
	for _, r := range all {
		failed += r.failed
		total += r.total
	}
	second := tab.Median(svStep2)
	rep.Para("After the step, the 2nd new replica serves %s ms later at the median (target ≤ 1 000 ms: %s) and the last one %s ms later; "+
		"%d of %d requests failed. The autoscaler decides on every 100 ms tick from a 1 s panic window, so a step shows in the panic window's average within a few "+
		"ticks, then a replica starts in about the time of a cold start.",
		bench.FormatValue(second), bench.Verdict(second, func(v float64) bool { return v <= 1000 }), bench.FormatValue(tab.Median(svStepLast)), failed, total)
	return nil
}

func (e *env) stepOnce(ctx context.Context, app string, pre, post time.Duration, clients, maxReplicas int) (stepRun, error) {
	var out stepRun
	if err := e.Deploy(ctx, app, fmt.Sprintf("image = \"cpuburn:1\"\n[scale]\nmin = 1\nmax = %d\ntarget_concurrency = 1\nidle_timeout = \"10m\"\n[resources]\ncpu = 0.5\n", maxReplicas)); err != nil {
		return out, err
	}
	defer e.Remove(context.WithoutCancel(ctx), app)
	var first string
	if err := e.WaitFor(ctx, app, 30*time.Second, "ready", func(a types.App) bool {
		for _, r := range a.Replicas {
			if r.State == "ready" {
				first = r.ID
				return true
			}
		}
		return false
	}); err != nil {
		return out, err
	}
	begin := time.Now()
	step := begin.Add(pre)
	g := &loadGen{e: e, app: app, path: "/?ms=20", stop: step.Add(post)}
	g.add(ctx, 1, 10000)
	type sample struct {
		t     time.Time
		ready int
	}
	var samples []sample
	samplerDone := make(chan struct{})
	go func() {
		defer close(samplerDone)
		tick := time.NewTicker(100 * time.Millisecond)
		defer tick.Stop()
		for time.Now().Before(g.stop) && ctx.Err() == nil {
			if a, err := e.Status(ctx, app); err == nil {
				samples = append(samples, sample{time.Now(), a.Ready})
			}
			<-tick.C
		}
	}()
	select {
	case <-ctx.Done():
	case <-time.After(time.Until(step)):
	}
	g.add(ctx, clients-1, 10000)
	g.wg.Wait()
	<-samplerDone
	if err := ctx.Err(); err != nil {
		return out, err
	}
	seen := map[string]time.Time{}
	for _, r := range g.recs {
		out.total++
		if !r.OK {
			out.failed++
			continue
		}
		if r.Replica == "" || r.Replica == first {
			continue
		}
		if t, ok := seen[r.Replica]; !ok || r.End.Before(t) {
			seen[r.Replica] = r.End
		}
	}
	e.Fail("load step", out.failed)
	for _, t := range seen {
		out.toNew = append(out.toNew, bench.Millis(t.Sub(step))[0])
	}
	sort.Float64s(out.toNew)
	// Series every 100 ms from the start of the run, x in seconds since
	// the step (negative before it).
	bins := int((pre + post) / (100 * time.Millisecond))
	lat := make([][]float64, bins)
	for _, r := range g.recs {
		if !r.OK {
			continue
		}
		b := int(r.End.Sub(begin) / (100 * time.Millisecond))
		if b >= 0 && b < bins {
			lat[b] = append(lat[b], bench.Millis(r.End.Sub(r.Start))[0])
		}
	}
	si := 0
	lastReady := math.NaN()
	for b := 0; b < bins; b++ {
		end := begin.Add(time.Duration(b+1) * 100 * time.Millisecond)
		for si < len(samples) && !samples[si].t.After(end) {
			lastReady = float64(samples[si].ready)
			si++
		}
		out.xs = append(out.xs, (float64(b+1)*100*float64(time.Millisecond)-float64(pre))/float64(time.Second))
		out.ready = append(out.ready, lastReady)
		p := math.NaN()
		if len(lat[b]) > 0 {
			p = bench.Stats(lat[b]).P99
		}
		out.p99 = append(out.p99, p)
	}
	return out, nil
}
