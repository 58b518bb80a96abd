package density

import (
	"context"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"sync"
	"time"

	"github.com/shoal-run/shoal/internal/api/types"
	"github.com/shoal-run/shoal/internal/bench"
	"github.com/shoal-run/shoal/internal/bench/kit"
)

// The first-visit burst: n apps of hello that never ran (min 0), each
// sent one request at about the same time, as on the morning after a
// quiet night; measured on the daemon under test and on the baseline's.
func init() {
	parts = append(parts, part{"first-visit burst", (*env).burst})
	alone["first-visit burst"] = true
}

// burstTitle is the title of the burst table.
const burstTitle = "First-visit burst"

// burstManifest is every burst app's shoal.toml but its name.
const burstManifest = "image = \"hello:1\"\n[scale]\nmin = 0\nmax = 2\n"

// burstLimit bounds one request of the burst.
const burstLimit = 3 * time.Minute

// burstRow is what one burst measured on one daemon.
type burstRow struct {
	n, ok, failed int
	codes         string
	p50, p99, max float64 // ms, the requests' times, failed ones included
	rate          float64 // apps answered 200 a second, from the burst's start to the last such answer
}

// bursts are the burst rows measured, in order: the daemon under test's
// and the baseline's at each size.
var bursts []struct {
	who string
	burstRow
}

// burst deploys n burst apps (named b0001...) on each daemon, sends each
// one request at once, and removes them again.
func (e *env) burst(ctx context.Context, n int, _ *bench.Report) error {
	for _, x := range []*kit.ServingEnv{e.base, e.ServingEnv} {
		if x == nil {
			continue
		}
		who := "this build"
		if x == e.base {
			who = "baseline"
		}
		apps := make([]string, n)
		for i := range apps {
			apps[i] = fmt.Sprintf("b%04d", i+1)
		}
		if err := deployBurstApps(ctx, x, apps); err != nil {
			return err
		}
		if err := waitAll(ctx, x, e.apps+n, 2*time.Minute, "deployed", func(types.App) bool { return true }); err != nil {
			return err
		}
		row := fire(ctx, x.Proxy, apps)
		e.o.Logf("density: first-visit burst of %d, %s: %d ok, %d failed (%s), p50 %.0f ms, p99 %.0f ms, %.2f starts/s",
			n, who, row.ok, row.failed, row.codes, row.p50, row.p99, row.rate)
		bursts = append(bursts, struct {
			who string
			burstRow
		}{who, row})
		x.Mu.Lock()
		if row.failed > 0 {
			if x.Failures == nil {
				x.Failures = map[string]int{}
			}
			x.Failures["first-visit burst"] += row.failed
		}
		x.Mu.Unlock()
		if err := removeApps(ctx, x, apps); err != nil {
			return err
		}
	}
	return nil
}

// fire sends one GET to each app through proxy, all released at once,
// and measures them.
func fire(ctx context.Context, proxy string, apps []string) burstRow {
	client := &http.Client{Timeout: burstLimit, Transport: &http.Transport{MaxIdleConnsPerHost: len(apps), DisableCompression: true}}
	defer client.CloseIdleConnections()
	row := burstRow{n: len(apps)}
	var mu sync.Mutex
	var wg sync.WaitGroup
	var ms []float64
	var last time.Duration
	codes := map[int]int{}
	gate := make(chan struct{})
	t0 := time.Now()
	for _, app := range apps {
		wg.Add(1)
		go func() {
			defer wg.Done()
			<-gate
			began := time.Now()
			code := kit.GetCode(ctx, client, proxy, app)
			mu.Lock()
			defer mu.Unlock()
			ms = append(ms, float64(time.Since(began))/float64(time.Millisecond))
			if code == http.StatusOK {
				row.ok++
				last = max(last, time.Since(t0))
				return
			}
			row.failed++
			codes[code]++
		}()
	}
	t0 = time.Now()
	close(gate)
	wg.Wait()
	st := bench.Stats(ms)
	row.p50, row.p99, row.max = st.Median, st.P99, st.Max
	if last > 0 {
		row.rate = float64(row.ok) / last.Seconds()
	}
	var cs []string
	for c, k := range codes {
		cs = append(cs, fmt.Sprintf("%d × %d", k, c))
	}
	sort.Strings(cs)
	row.codes = strings.Join(cs, ", ")
	return row
}

// deployBurstApps deploys apps (min 0: nothing starts) on x, 8 at a time.
func deployBurstApps(ctx context.Context, x *kit.ServingEnv, apps []string) error {
	dir := filepath.Join(x.Dir, "manifests")
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return err
	}
	return eachApp(apps, func(name string) error {
		path := filepath.Join(dir, name+".toml")
		if err := os.WriteFile(path, []byte(fmt.Sprintf("name = %q\n", name)+burstManifest), 0o644); err != nil {
			return err
		}
		_, err := x.Daemon.CLI(ctx, "app", "deploy", "-f", path, "--detach")
		return err
	})
}

// removeApps deletes apps from x, 8 at a time, and waits until they are
// gone.
func removeApps(ctx context.Context, x *kit.ServingEnv, apps []string) error {
	del := func(name string) error {
		req, err := http.NewRequestWithContext(ctx, "DELETE", "http://shoal/v1/apps/"+name, nil)
		if err != nil {
			return err
		}
		resp, err := x.Daemon.HTTP.Do(req)
		if err != nil {
			return err
		}
		resp.Body.Close()
		if resp.StatusCode >= 300 && resp.StatusCode != http.StatusNotFound && resp.StatusCode != http.StatusConflict { // 409: being deleted
			return fmt.Errorf("%s", resp.Status)
		}
		return nil
	}
	err := eachApp(apps, func(name string) error {
		// A delete is asked again when the daemon was too busy to answer.
		var err error
		for try := 0; try < 5; try++ {
			if err = del(name); err == nil || ctx.Err() != nil {
				break
			}
		}
		return err
	})
	if err != nil {
		return err
	}
	deadline := time.Now().Add(2*time.Minute + time.Duration(len(apps))*200*time.Millisecond)
	for {
		all, err := list(ctx, x)
		left := 0
		for _, a := range all {
			if strings.HasPrefix(a.Name, "b") {
				left++
			}
		}
		if err == nil && left == 0 {
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("%d burst apps left after their removal (%v)", left, err)
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(500 * time.Millisecond):
		}
	}
}

// eachApp calls f for every app, 8 at a time, and returns the first error.
func eachApp(apps []string, f func(name string) error) error {
	var wg sync.WaitGroup
	var mu sync.Mutex
	var first error
	next := make(chan string)
	for w := 0; w < 8; w++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for name := range next {
				if err := f(name); err != nil {
					mu.Lock()
					if first == nil {
						first = fmt.Errorf("app %s: %w", name, err)
					}
					mu.Unlock()
				}
			}
		}()
	}
	for _, name := range apps {
		next <- name
	}
	close(next)
	wg.Wait()
	return first
}

// burstSummary writes the burst table, one row per daemon and size.
func burstSummary(rep *bench.Report) {
	if len(bursts) == 0 {
		return
	}
	var b strings.Builder
	b.WriteString("#### " + burstTitle + "\n\n")
	b.WriteString("N apps of hello (`min = 0`, `max = 2`, defaults otherwise) deployed and never started, then one `GET /` to each through the proxy, " +
		"all released at once on loopback (one connection each, 3 min client timeout); the baseline is the daemon from `BENCH_DENSITY_BASELINE` " +
		"on the same host in the same run, burst right before this build's. Times are each request's, failed ones included; " +
		"starts/s = apps answered 200 / the time to the last of them.\n\n")
	b.WriteString("| apps | daemon | ok | failed | p50 ms | p99 ms | max ms | starts/s |\n|---:|---|---:|---:|---:|---:|---:|---:|\n")
	f := bench.FormatValue
	for _, r := range bursts {
		failed := fmt.Sprint(r.failed)
		if r.codes != "" {
			failed += " (" + r.codes + ")"
		}
		fmt.Fprintf(&b, "| %d | %s | %d | %s | %s | %s | %s | %s |\n", r.n, r.who, r.ok, failed, f(r.p50), f(r.p99), f(r.max), f(r.rate))
	}
	b.WriteString("\n")
	rep.Markdown(b.String())
}
