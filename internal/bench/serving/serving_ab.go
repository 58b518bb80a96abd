package serving

import (
	"context"
	"strconv"
	"time"

	"github.com/shoal-run/shoal/internal/api/types"
	"github.com/shoal-run/shoal/internal/bench"
	"github.com/shoal-run/shoal/internal/bench/kit"
)

// runAB runs ab against app through the proxy for secs seconds with c
// concurrent clients.
func (e *env) runAB(ctx context.Context, app, path string, c, secs int) (kit.ABRun, error) {
	return kit.RunAB(ctx, e.Dir, e.Proxy, app, path, "-q", "-c", strconv.Itoa(c), "-t", strconv.Itoa(secs), "-s", "10")
}

// classic reproduces the scale-out (one replica to two) and scale-up (CPU
// quota 0.3 to 0.6 cores) experiments with ab as the load.
func (e *env) classic(ctx context.Context, rep *bench.Report) error {
	rep.Heading("Scale-out and scale-up under ab")
	secs := 20
	if e.Opts.Quick {
		secs = 5
	}
	const conc, path = 4, "/?ms=10"
	at := secs / 2
	// Scale-out: the operator adds a replica at a fixed time.
	if err := e.Deploy(ctx, "burn-out", "image = \"cpuburn:1\"\n[scale]\nmin = 1\nmax = 1\ntarget_concurrency = 100\nidle_timeout = \"10m\"\n[resources]\ncpu = 0.3\n"); err != nil {
		return err
	}
	if err := e.WaitFor(ctx, "burn-out", 30*time.Second, "ready", func(a types.App) bool { return a.Ready >= 1 }); err != nil {
		return err
	}
	stop := make(chan struct{})
	samples := e.WatchApp(ctx, "burn-out", stop)
	scaleErr := make(chan error, 1)
	var scaledAt time.Time
	go func() {
		select {
		case <-time.After(time.Duration(at) * time.Second):
		case <-ctx.Done():
			scaleErr <- ctx.Err()
			return
		}
		scaledAt = time.Now()
		_, err := e.Daemon.CLI(ctx, "app", "scale", "burn-out", "--min", "2", "--max", "2")
		scaleErr <- err
	}()
	out, err := e.runAB(ctx, "burn-out", path, conc, secs)
	close(stop)
	outSamples := samples()
	if serr := <-scaleErr; serr != nil && err == nil {
		err = serr
	}
	if err != nil {
		return err
	}
	e.Fail("scale-out and scale-up", out.Failed)
	if err := e.Remove(ctx, "burn-out"); err != nil {
		return err
	}
	// Scale-up: the autoscaler raises the quota of a throttled replica.
	if err := e.Deploy(ctx, "burn-up", "image = \"cpuburn:1\"\n[scale]\nmin = 1\nmax = 1\ntarget_concurrency = 100\nidle_timeout = \"10m\"\n[resources]\ncpu = 0.3\nmax_cpu = 0.6\n"); err != nil {
		return err
	}
	if err := e.WaitFor(ctx, "burn-up", 30*time.Second, "ready", func(a types.App) bool { return a.Ready >= 1 }); err != nil {
		return err
	}
	stop = make(chan struct{})
	samples = e.WatchApp(ctx, "burn-up", stop)
	up, err := e.runAB(ctx, "burn-up", path, conc, secs)
	close(stop)
	upSamples := samples()
	if err != nil {
		return err
	}
	e.Fail("scale-out and scale-up", up.Failed)
	cpuEvents := 0
	var evs []types.Event
	if err := e.GetJSON(ctx, "/v1/events?app=burn-up", &evs); err == nil {
		for _, ev := range evs {
			if ev.Kind == "cpu" {
				cpuEvents++
			}
		}
	}
	if err := e.Remove(ctx, "burn-up"); err != nil {
		return err
	}
	e.renderClassic(rep, out, outSamples, scaledAt, up, upSamples, cpuEvents, secs, conc, path)
	return nil
}
