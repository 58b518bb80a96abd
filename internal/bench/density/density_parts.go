package density

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/shoal-run/shoal/internal/api/types"
	"github.com/shoal-run/shoal/internal/bench"
	"github.com/shoal-run/shoal/internal/bench/kit"
)

// manifest is every app's shoal.toml but its name.
const manifest = "image = \"hello:1\"\n[scale]\nmin = 1\nmax = 2\nidle_timeout = \"5s\"\nfreeze_timeout = \"1h\"\n"

// appName is the i-th app's name (from 1).
func appName(i int) string { return fmt.Sprintf("d%04d", i) }

// names are the first n apps' names.
func names(n int) []string {
	out := make([]string, n)
	for i := range out {
		out[i] = appName(i + 1)
	}
	return out
}

// deployAll deploys apps from..to (inclusive) on x, 8 at a time, detached.
func deployAll(ctx context.Context, x *kit.ServingEnv, from, to int) error {
	dir := filepath.Join(x.Dir, "manifests")
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return err
	}
	apps := make([]string, 0, max(to-from+1, 0))
	for i := from; i <= to; i++ {
		apps = append(apps, appName(i))
	}
	return eachApp(apps, func(name string) error {
		path := filepath.Join(dir, name+".toml")
		if err := os.WriteFile(path, []byte(fmt.Sprintf("name = %q\n", name)+manifest), 0o644); err != nil {
			return fmt.Errorf("deploy: %w", err)
		}
		if _, err := x.Daemon.CLI(ctx, "app", "deploy", "-f", path, "--detach"); err != nil {
			return fmt.Errorf("deploy: %w", err)
		}
		return nil
	})
}

// list returns every app of x.
func list(ctx context.Context, x *kit.ServingEnv) ([]types.App, error) {
	var apps []types.App
	err := x.GetJSON(ctx, "/v1/apps", &apps)
	return apps, err
}

// waitAll polls x's apps every 500 ms until ok holds for n of them, or
// fails after limit.
func waitAll(ctx context.Context, x *kit.ServingEnv, n int, limit time.Duration, what string, ok func(types.App) bool) error {
	deadline := time.Now().Add(limit)
	for {
		apps, err := list(ctx, x)
		c := 0
		for _, a := range apps {
			if ok(a) {
				c++
			}
		}
		if err == nil && c >= n {
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("%d of %d apps %s after %s (%v)", c, n, what, limit, err)
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(500 * time.Millisecond):
		}
	}
}

func readyOne(a types.App) bool { return a.Ready >= 1 }

// scaleAll sets min of apps 1..n on x, 8 calls at a time.
func scaleAll(ctx context.Context, x *kit.ServingEnv, n, min int) error {
	var wg sync.WaitGroup
	var mu sync.Mutex
	var first error
	next := make(chan string)
	for w := 0; w < 8; w++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for name := range next {
				body, _ := json.Marshal(types.ScaleRequest{Min: &min})
				req, err := http.NewRequestWithContext(ctx, "POST", "http://shoal/v1/apps/"+name+"/scale", bytes.NewReader(body))
				if err == nil {
					req.Header.Set("Content-Type", "application/json")
					var resp *http.Response
					if resp, err = x.Daemon.HTTP.Do(req); err == nil {
						resp.Body.Close()
						if resp.StatusCode != http.StatusOK {
							err = fmt.Errorf("%s", resp.Status)
						}
					}
				}
				if err != nil {
					mu.Lock()
					if first == nil {
						first = fmt.Errorf("scale %s min %d: %w", name, min, err)
					}
					mu.Unlock()
				}
			}
		}()
	}
	for _, name := range names(n) {
		next <- name
	}
	close(next)
	wg.Wait()
	return first
}

// grow brings the daemon (and the baseline's) to n apps, each with a
// ready replica: the apps already there scaled back to min 1, the new
// ones deployed all at once; it times the deploys to all ready.
func (e *env) grow(ctx context.Context, n int) error {
	limit := time.Duration(n)*time.Second + 2*time.Minute
	from := e.apps + 1
	for _, x := range []*kit.ServingEnv{e.ServingEnv, e.base} {
		if x == nil {
			continue
		}
		if e.apps > 0 {
			if err := scaleAll(ctx, x, e.apps, 1); err != nil {
				return err
			}
		}
		t0 := time.Now()
		if err := deployAll(ctx, x, from, n); err != nil {
			return err
		}
		if err := waitAll(ctx, x, n, limit, "ready", readyOne); err != nil {
			return err
		}
		if x == e.ServingEnv {
			r := e.row(n)
			r.deploy = time.Since(t0).Seconds()
			r.startRate = float64(n-from+1) / r.deploy
		}
	}
	e.apps = n
	return nil
}

// cpuTicks is a process's utime + stime in clock ticks (USER_HZ, 100).
func cpuTicks(pid int) (float64, error) {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return 0, err
	}
	s := string(b)
	i := strings.LastIndexByte(s, ')')
	if i < 0 {
		return 0, fmt.Errorf("/proc/%d/stat: no command", pid)
	}
	f := strings.Fields(s[i+1:])
	if len(f) < 13 {
		return 0, fmt.Errorf("/proc/%d/stat: %d fields", pid, len(f))
	}
	u, err1 := strconv.ParseFloat(f[11], 64)
	st, err2 := strconv.ParseFloat(f[12], 64)
	if err1 != nil || err2 != nil {
		return 0, fmt.Errorf("/proc/%d/stat: utime %q stime %q", pid, f[11], f[12])
	}
	return u + st, nil
}

// idleCPU samples the daemons' CPU (% of a core) over e.window in windows
// of 10 s, both daemons in the same windows.
func (e *env) idleCPU(ctx context.Context, xs ...*kit.ServingEnv) ([][]float64, error) {
	const w = 10 * time.Second
	out := make([][]float64, len(xs))
	prev := make([]float64, len(xs))
	read := func() error {
		for i, x := range xs {
			v, err := cpuTicks(x.Daemon.Pid())
			if err != nil {
				return err
			}
			prev[i] = v
		}
		return nil
	}
	if err := read(); err != nil {
		return nil, err
	}
	for k := 0; k < int(e.window/w); k++ {
		t0 := time.Now()
		last := append([]float64(nil), prev...)
		select {
		case <-ctx.Done():
			return nil, ctx.Err()
		case <-time.After(w):
		}
		if err := read(); err != nil {
			return nil, err
		}
		secs := time.Since(t0).Seconds()
		for i := range xs {
			out[i] = append(out[i], (prev[i]-last[i])/100/secs*100)
		}
	}
	return out, nil
}

// idleReady measures the daemon's CPU with n ready replicas and no
// request, and the baseline's in the same windows.
func (e *env) idleReady(ctx context.Context, n int, _ *bench.Report) error {
	time.Sleep(10 * time.Second) // the starts' tail settles
	xs := []*kit.ServingEnv{e.ServingEnv}
	if e.base != nil {
		xs = append(xs, e.base)
	}
	v, err := e.idleCPU(ctx, xs...)
	if err != nil {
		return err
	}
	name := fmt.Sprintf("%d ready replicas", n)
	row := bench.Row{Name: name, Command: "utime + stime of `shoal daemon` over 10 s, no request", Values: v[0]}
	r := e.row(n)
	r.ready = bench.Stats(v[0]).Median
	if e.base != nil {
		b := bench.Row{Name: name + " (baseline)", Command: row.Command + ", " + os.Getenv("BENCH_DENSITY_BASELINE"), Values: v[1]}
		row.Baseline = b.Name
		r.readyBase = bench.Stats(v[1]).Median
		e.idle = append(e.idle, b)
	}
	e.idle = append(e.idle, row)
	return nil
}

// memory reads the replicas' memory (their cgroup parent's) and the
// daemon's resident memory, per replica.
func (e *env) memory(ctx context.Context, n int, _ *bench.Report) error {
	r := e.row(n)
	cg := e.net.CgroupParent
	for _, f := range []string{
		filepath.Join("/sys/fs/cgroup/memory", cg, "memory.usage_in_bytes"),
		filepath.Join("/sys/fs/cgroup", cg, "memory.current"),
	} {
		if b, err := os.ReadFile(f); err == nil {
			v, _ := strconv.ParseFloat(strings.TrimSpace(string(b)), 64)
			r.memCgroup = v / float64(n) / (1 << 20)
			break
		}
	}
	if b, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", e.Daemon.Pid())); err == nil {
		for _, l := range strings.Split(string(b), "\n") {
			if v, ok := strings.CutPrefix(l, "VmRSS:"); ok {
				kb, _ := strconv.ParseFloat(strings.TrimSuffix(strings.TrimSpace(v), " kB"), 64)
				r.memDaemon = kb / 1024 / float64(n)
			}
		}
	}
	return nil
}

// restart kills the daemon (SIGKILL) and times its return: to its API
// answering, and to every app's replica adopted and ready again.
func (e *env) restart(ctx context.Context, n int, _ *bench.Report) error {
	t0 := time.Now()
	if err := e.Daemon.Restart(ctx, syscall.SIGKILL); err != nil {
		return err
	}
	r := e.row(n)
	r.restartAPI = time.Since(t0).Seconds()
	if err := waitAll(ctx, e.ServingEnv, n, time.Duration(n)*time.Second+time.Minute, "ready after the restart", func(a types.App) bool {
		return a.Ready >= 1
	}); err != nil {
		return err
	}
	r.restartAll = time.Since(t0).Seconds()
	return nil
}

// idleFrozen scales every app to min 0, waits for their replicas to
// freeze (idle_timeout 5 s) and measures the daemon's CPU.
func (e *env) idleFrozen(ctx context.Context, n int, _ *bench.Report) error {
	if err := scaleAll(ctx, e.ServingEnv, n, 0); err != nil {
		return err
	}
	if err := waitAll(ctx, e.ServingEnv, n, 2*time.Minute+time.Duration(n)*100*time.Millisecond, "frozen", func(a types.App) bool {
		return a.Ready == 0 && kit.CountState(a, "frozen") >= 1
	}); err != nil {
		return err
	}
	time.Sleep(5 * time.Second)
	v, err := e.idleCPU(ctx, e.ServingEnv)
	if err != nil {
		return err
	}
	e.idle = append(e.idle, bench.Row{Name: fmt.Sprintf("%d frozen replicas", n), Command: "utime + stime of `shoal daemon` over 10 s, no request", Values: v[0]})
	e.row(n).frozen = bench.Stats(v[0]).Median
	return nil
}

// zipfLoad is the Zipf run at each size: 100 requests/s for 30 s (quick:
// 20/s for 5 s), s = 1.1, seed 1, from the apps frozen.
func (e *env) zipfLoad() kit.ZipfLoad {
	z := kit.ZipfLoad{Rate: 100, Duration: 30 * time.Second, S: 1.1, Seed: 1, InFlight: 512}
	if e.o.Quick {
		z.Rate, z.Duration = 20, 5*time.Second
	}
	return z
}

// zipf runs the harness's Zipf load over the n apps, their replicas
// frozen (idleFrozen).
func (e *env) zipf(ctx context.Context, n int, _ *bench.Report) error {
	z := e.zipfLoad()
	z.Apps = names(n)
	res, err := z.Run(ctx, e.Proxy)
	if err != nil {
		return err
	}
	r := e.row(n)
	r.zipfSent, r.zipfOK, r.zipfFailed = res.Sent, res.OK, res.Failed
	st := bench.Stats(res.Latency)
	r.zipfP50, r.zipfP99 = st.Median, st.P99
	var first []float64
	for _, v := range res.First {
		first = append(first, v)
	}
	fs := bench.Stats(first)
	r.firstP50, r.firstP99 = fs.Median, fs.P99
	var codes []string
	for c, k := range res.Codes {
		codes = append(codes, fmt.Sprintf("%d × %d", k, c))
	}
	sort.Strings(codes)
	r.zipfCodes = strings.Join(codes, ", ")
	return nil
}
