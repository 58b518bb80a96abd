package fastcontainer

import (
	"context"
	"fmt"
	"strconv"
	"time"

	"github.com/shoal-run/shoal/internal/api/types"
	"github.com/shoal-run/shoal/internal/bench"
	"github.com/shoal-run/shoal/internal/bench/kit"
)

// result is what one run recorded: ab's per-request times, the app's
// status every 100 ms and its events, with the time the load started.
type result struct {
	spec    runSpec
	launch  time.Time // ab started
	ab      kit.ABRun
	samples []kit.AppSample
	events  []types.Event
	bound   int // ab's time limit, s
	// cpu is what the cgroups of the app's replicas counted during the
	// load (summed over the replicas), cpuErr why it could not be read.
	cpu     cpuCounters
	cpuErr  string
	cpusets []string // the CPUs each replica was pinned to at the end
}

// counters reads the CPU counters of the app's replicas with a process.
func (e *env) counters(ctx context.Context, app string) (map[string]cpuCounters, []string, error) {
	a, err := e.Status(ctx, app)
	if err != nil {
		return nil, nil, err
	}
	out := map[string]cpuCounters{}
	var sets []string
	for _, r := range a.Replicas {
		if r.Pid == 0 {
			continue
		}
		c, err := readCPU(r.Pid)
		if err != nil {
			return nil, nil, fmt.Errorf("replica %s: %w", r.ID, err)
		}
		out[r.ID] = c
		sets = append(sets, r.CPUSet)
	}
	return out, sets, nil
}

// manifest is examples/debian/apache-php/shoal.toml with the paper's
// resources: 0.3 of a core, raised up to maxCPU; one replica kept ready
// (the paper's container was running when the load began), up to max.
func manifest(image string, max int, maxCPU float64) string {
	return fmt.Sprintf(`image = %q
port = 80
[scale]
min = 1
max = %d
idle_timeout = "10m"
[resources]
cpu = %g
max_cpu = %g
memory = "256Mi"
pids = 256
[health]
tcp = true
`, image, max, baseCPU, maxCPU)
}

// run deploys the apache-php example as s.app, waits for its replica,
// loads it with ab through the proxy while sampling its status, and
// removes it.
func (e *env) run(ctx context.Context, s runSpec) (result, error) {
	res := result{spec: s, bound: 900}
	if e.Opts.Quick {
		res.bound = 60
	}
	if err := e.Deploy(ctx, s.app, manifest(e.image, s.max, s.maxCPU)); err != nil {
		return res, err
	}
	defer e.Remove(context.WithoutCancel(ctx), s.app)
	if err := e.WaitFor(ctx, s.app, 60*time.Second, "ready", func(a types.App) bool { return a.Ready >= 1 }); err != nil {
		return res, err
	}
	// Apache's first answer loads PHP's modules: the paper's container
	// had answered before its load began.
	if _, _, _, err := e.Request(ctx, s.app, "/"); err != nil {
		return res, err
	}
	bench.Settle(ctx, bench.SettleIdle, bench.SettleWindow, 2*time.Second)
	e.Opts.Logf("fastcontainer: %s: ab -c %d -n %d", s.app, concurrency, s.requests)
	before, _, cerr := e.counters(ctx, s.app)
	stop := make(chan struct{})
	samples := e.WatchApp(ctx, s.app, stop)
	actx, cancel := context.WithTimeout(ctx, time.Duration(res.bound+120)*time.Second)
	defer cancel()
	wctx, wcancel := context.WithCancel(actx)
	defer wcancel()
	var stopAB chan struct{}
	if s.timed {
		stopAB = make(chan struct{})
		go e.stopAfterScaleOut(wctx, s.app, stopAB)
	}
	res.launch = time.Now()
	// -t before -n: ab's -t also sets the count, which -n then replaces;
	// ab stops at whichever comes first. -r: a failed read is counted,
	// not the end of the run.
	ab, err := kit.RunABUntil(actx, stopAB, e.Dir, e.Proxy, s.app, "/", "-q", "-r", "-s", "60",
		"-t", strconv.Itoa(res.bound), "-n", strconv.Itoa(s.requests), "-c", strconv.Itoa(concurrency))
	wcancel()
	close(stop)
	res.ab, res.samples = ab, samples()
	if err != nil {
		return res, err
	}
	after, sets, aerr := e.counters(ctx, s.app)
	if cerr == nil {
		cerr = aerr
	}
	if cerr != nil {
		res.cpuErr = cerr.Error()
	}
	for id, c := range after {
		d := c.sub(before[id]) // a replica started during the load began at zero
		res.cpu = cpuCounters{periods: res.cpu.periods + d.periods, throttled: res.cpu.throttled + d.throttled, usage: res.cpu.usage + d.usage}
	}
	res.cpusets = sets
	e.Fail(s.app, failed(res))
	if err := e.GetJSON(ctx, "/v1/events?app="+s.app, &res.events); err != nil {
		return res, err
	}
	e.Opts.Logf("fastcontainer: %s: %d of %d requests complete in %.1f s, %d failed", s.app, ab.Complete, asked(res), ab.Took, ab.Failed)
	return res, nil
}

// stopAfterScaleOut closes stop quickTail after app has two ready
// replicas, polling its status every 100 ms until ctx ends.
func (e *env) stopAfterScaleOut(ctx context.Context, app string, stop chan<- struct{}) {
	tick := time.NewTicker(100 * time.Millisecond)
	defer tick.Stop()
	for {
		if a, err := e.Status(ctx, app); err == nil && a.Ready >= 2 {
			break
		}
		select {
		case <-ctx.Done():
			return
		case <-tick.C:
		}
	}
	select {
	case <-ctx.Done():
	case <-time.After(quickTail):
		close(stop)
	}
}

// asked is the number of requests a run was to complete: its count, or
// for a timed run those ab made before the load ended.
func asked(r result) int {
	if r.spec.timed {
		return r.ab.Complete
	}
	return r.spec.requests
}

// failed is a run's failed requests: ab's, and those it did not make.
func failed(r result) int { return r.ab.Failed + max(0, asked(r)-r.ab.Complete) }
