package serving

import (
	"bufio"
	"context"
	"fmt"
	"math"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/shoal-run/shoal/internal/api/types"
	"github.com/shoal-run/shoal/internal/bench"
)

// abRun is one ab run: per-request timings from `ab -g` and its counts.
type abRun struct {
	begin   time.Time
	starts  []float64 // s since begin, per request
	ttimes  []float64 // ms, per request
	failed  int
	command string
}

// perSecond returns, for each whole second of the run, the mean and p99
// total time of the requests that started in it.
func (r abRun) perSecond(secs int) (xs, mean, p99 []float64) {
	by := make([][]float64, secs)
	for i, s := range r.starts {
		if k := int(s); k >= 0 && k < secs {
			by[k] = append(by[k], r.ttimes[i])
		}
	}
	for k := 0; k < secs; k++ {
		xs = append(xs, float64(k))
		st := bench.Stats(by[k])
		mean, p99 = append(mean, st.Mean), append(p99, st.P99)
	}
	return xs, mean, p99
}

// window returns the total times of requests that started in [from, to) s.
func (r abRun) window(from, to float64) []float64 {
	var out []float64
	for i, s := range r.starts {
		if s >= from && s < to {
			out = append(out, r.ttimes[i])
		}
	}
	return out
}

// runAB runs ab against app through the proxy for secs seconds with c
// concurrent clients.
func (e *env) runAB(ctx context.Context, app, path string, c, secs int) (abRun, error) {
	gnu := filepath.Join(e.Dir, app+".ab.tsv")
	args := []string{"-q", "-c", strconv.Itoa(c), "-t", strconv.Itoa(secs), "-s", "10", "-g", gnu,
		"-H", "Host: " + app + ".localhost", "http://" + e.Proxy + path}
	run := abRun{begin: time.Now(), command: "ab " + strings.Join(quoteArgs(args), " ")}
	run.command = strings.ReplaceAll(run.command, gnu, "FILE")
	out, err := exec.CommandContext(ctx, "ab", args...).CombinedOutput()
	if err != nil {
		return run, fmt.Errorf("ab: %w: %s", err, bench.OneLine(string(out)))
	}
	for _, line := range strings.Split(string(out), "\n") {
		f := strings.Fields(line)
		switch {
		case len(f) >= 2 && strings.HasPrefix(f[0], "(Connect:"):
			// The breakdown of "Failed requests": cpuburn's answers differ
			// in length (its timing, the replica's name), which ab counts
			// as failures of "Length"; those are not failed requests.
			for i := 0; i+1 < len(f); i += 2 {
				if k := strings.Trim(f[i], "(:"); k != "Length" {
					n, _ := strconv.Atoi(strings.Trim(f[i+1], ",)"))
					run.failed += n
				}
			}
		case len(f) >= 3 && f[0] == "Non-2xx" && f[1] == "responses:":
			n, _ := strconv.Atoi(f[2])
			run.failed += n
		}
	}
	f, err := os.Open(gnu)
	if err != nil {
		return run, fmt.Errorf("ab -g: %w", err)
	}
	defer f.Close()
	type rec struct{ start, ttime float64 }
	var recs []rec
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		cols := strings.Split(sc.Text(), "\t")
		if len(cols) < 6 || cols[0] == "starttime" {
			continue
		}
		// starttime, seconds, ctime, dtime, ttime, wait; seconds is the
		// start in whole seconds since the epoch.
		us, err1 := strconv.ParseFloat(cols[1], 64)
		tt, err2 := strconv.ParseFloat(cols[4], 64)
		if err1 != nil || err2 != nil {
			continue
		}
		recs = append(recs, rec{us, tt})
	}
	if len(recs) == 0 {
		return run, fmt.Errorf("ab -g: no requests recorded: %s", bench.OneLine(string(out)))
	}
	sort.Slice(recs, func(i, j int) bool { return recs[i].start < recs[j].start })
	first := recs[0].start
	run.begin = time.Unix(int64(first), 0)
	for _, r := range recs {
		run.starts = append(run.starts, r.start-first)
		run.ttimes = append(run.ttimes, r.ttime)
	}
	return run, nil
}

// cpuSample is a replica's CPU quota at a time.
type cpuSample struct {
	t   time.Time
	cpu float64
	n   int // ready replicas
}

// watchApp samples the app's status every 100 ms until stop is closed.
func (e *env) watchApp(ctx context.Context, app string, stop <-chan struct{}) func() []cpuSample {
	var (
		mu  sync.Mutex
		out []cpuSample
	)
	done := make(chan struct{})
	go func() {
		defer close(done)
		tick := time.NewTicker(100 * time.Millisecond)
		defer tick.Stop()
		for {
			if a, err := e.Status(ctx, app); err == nil {
				s := cpuSample{t: time.Now(), n: a.Ready, cpu: math.NaN()}
				for _, r := range a.Replicas {
					if r.State == "ready" && (math.IsNaN(s.cpu) || r.CPU > s.cpu) {
						s.cpu = r.CPU
					}
				}
				mu.Lock()
				out = append(out, s)
				mu.Unlock()
			}
			select {
			case <-stop:
				return
			case <-ctx.Done():
				return
			case <-tick.C:
			}
		}
	}()
	return func() []cpuSample {
		<-done
		return out
	}
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
	samples := e.watchApp(ctx, "burn-out", stop)
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
	e.Fail("scale-out and scale-up", out.failed)
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
	samples = e.watchApp(ctx, "burn-up", stop)
	up, err := e.runAB(ctx, "burn-up", path, conc, secs)
	close(stop)
	upSamples := samples()
	if err != nil {
		return err
	}
	e.Fail("scale-out and scale-up", up.failed)
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
