package bench

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptrace"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"time"

	"github.com/shoal-run/shoal/internal/api"
)

func init() {
	Register(Suite{Name: "serving", Title: "Serving: cold starts, thaws, the proxy and autoscaling", Run: Serving})
}

// The serving suite's daemon network and cgroup parent, apart from the
// other suites'.
var servingNet = daemonNet{bridge: "shoalbv0", subnet: "10.185.0.0/16", cgroupParent: "/shoal-bench-serving"}

// servingEnv is a shoal daemon with the example images built and a client
// for its proxy.
type servingEnv struct {
	o      Options
	dir    string
	d      *cliEnv
	proxy  string // host:port of the daemon's proxy
	client *http.Client

	mu   sync.Mutex
	apps map[string]bool // deployed and not yet removed

	failures map[string]int // failed requests by part
	tables   []Table        // every table added, for the targets
}

// Serving runs the serving suite: cold start and thaw to first byte, the
// proxy beside nginx and a direct connection under wrk, the reaction of
// the autoscaler to a step in load, and the classic scale-out and scale-up
// experiments under ab.
func Serving(ctx context.Context, o Options) (_ *Report, retErr error) {
	if o.ShoalBin == "" {
		return nil, fmt.Errorf("serving: the shoal binary under test is required")
	}
	rep := NewReport(ctx, "serving", "Serving: cold starts, thaws, the proxy and autoscaling", o)
	dir, err := o.ScratchDir("serving")
	if err != nil {
		return nil, err
	}
	defer os.RemoveAll(dir)
	e, err := newServingEnv(ctx, o, dir, servingNet, "hello", "slowboot", "cpuburn")
	if err != nil {
		return nil, fmt.Errorf("serving: %w", err)
	}
	defer func() {
		if err := e.close(context.WithoutCancel(ctx)); err != nil && retErr == nil {
			retErr = fmt.Errorf("serving: %w", err)
		}
	}()
	rep.Para("Every figure here comes from one run of the real `shoal daemon` (runc, an embedded store, replicas on its own bridge) " +
		"and its proxy on loopback, with the example apps *hello* (answers at once), *slowboot* (listens only after a 1.5 s boot) " +
		"and *cpuburn* (`/?ms=N` burns N ms of CPU per request). Requests name the app in their `Host` header (`<app>.localhost`).")
	for _, part := range []struct {
		name string
		run  func(context.Context, *Report) error
	}{
		{"cold start and thaw", e.coldAndThaw},
		{"proxy throughput", e.throughput},
		{"load step", e.loadStep},
		{"scale-out and scale-up", e.classic},
	} {
		if err := part.run(ctx, rep); err != nil {
			return rep, fmt.Errorf("serving: %s: %w", part.name, err)
		}
	}
	e.summary(rep)
	return rep, nil
}

// newServingEnv starts a daemon on network n and builds the example apps
// named as images NAME:1.
func newServingEnv(ctx context.Context, o Options, dir string, n daemonNet, examples ...string) (_ *servingEnv, retErr error) {
	e := &servingEnv{o: o, dir: dir, apps: map[string]bool{}, failures: map[string]int{}}
	d, err := startDaemonOn(ctx, o.ShoalBin, filepath.Join(dir, "daemon"), n)
	if err != nil {
		return nil, err
	}
	e.d = d
	defer func() {
		if retErr != nil {
			e.close(context.WithoutCancel(ctx))
		}
	}()
	var info struct {
		Proxy string `json:"proxy"`
	}
	out, err := e.output(ctx, "info", "-o", "json")
	if err != nil {
		return nil, err
	}
	if err := json.Unmarshal([]byte(out), &info); err != nil {
		return nil, fmt.Errorf("shoal info: %w", err)
	}
	if info.Proxy == "" {
		return nil, fmt.Errorf("shoal info: the daemon runs no proxy")
	}
	e.proxy = info.Proxy
	e.client = &http.Client{Timeout: 60 * time.Second, Transport: &http.Transport{
		MaxIdleConnsPerHost: 64, IdleConnTimeout: time.Minute, DisableCompression: true,
	}}
	for _, app := range examples {
		bin, err := o.ExampleBinary(ctx, app, dir)
		if err != nil {
			return nil, err
		}
		src := filepath.Join(dir, "images", app)
		if err := copyFileMode(bin, filepath.Join(src, app), 0o755); err != nil {
			return nil, err
		}
		if _, err := e.d.cli(ctx, "image", "build", src, "--tag", app+":1", "--entrypoint", "/"+app, "--port", "8080"); err != nil {
			return nil, err
		}
	}
	return e, nil
}

// output runs the shoal CLI and returns what it printed on stdout.
func (e *servingEnv) output(ctx context.Context, args ...string) (string, error) {
	cmd := exec.CommandContext(ctx, e.d.bin, args...)
	cmd.Env = append(os.Environ(), "SHOAL_HOST="+e.d.host)
	var stderr strings.Builder
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		return "", fmt.Errorf("shoal %s: %w: %s", strings.Join(args, " "), err, strings.TrimSpace(stderr.String()))
	}
	return string(out), nil
}

// getJSON decodes the answer of a GET on the daemon's API.
func (e *servingEnv) getJSON(ctx context.Context, path string, v any) error {
	resp, err := e.d.get(ctx, path)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		b, _ := io.ReadAll(io.LimitReader(resp.Body, 4096))
		return fmt.Errorf("GET %s: %s: %s", path, resp.Status, strings.TrimSpace(string(b)))
	}
	return json.NewDecoder(resp.Body).Decode(v)
}

// status returns the app as `shoal app status NAME -o json` shows it, from
// the API directly (the CLI's start-up would dominate a 100 ms poll).
func (e *servingEnv) status(ctx context.Context, app string) (api.App, error) {
	var a api.App
	err := e.getJSON(ctx, "/v1/apps/"+app, &a)
	return a, err
}

// deploy writes a shoal.toml and runs `shoal app deploy -f`.
func (e *servingEnv) deploy(ctx context.Context, name, manifest string) error {
	path := filepath.Join(e.dir, "manifests", name+".toml")
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		return err
	}
	if err := os.WriteFile(path, []byte(fmt.Sprintf("name = %q\n", name)+manifest), 0o644); err != nil {
		return err
	}
	e.mu.Lock()
	e.apps[name] = true
	e.mu.Unlock()
	_, err := e.d.cli(ctx, "app", "deploy", "-f", path)
	return err
}

// remove runs `shoal app rm NAME`.
func (e *servingEnv) remove(ctx context.Context, name string) error {
	_, err := e.d.cli(ctx, "app", "rm", name)
	if err == nil {
		e.mu.Lock()
		delete(e.apps, name)
		e.mu.Unlock()
	}
	return err
}

// waitFor polls the app's status every 20 ms until ok holds, or fails after
// limit.
func (e *servingEnv) waitFor(ctx context.Context, app string, limit time.Duration, what string, ok func(api.App) bool) error {
	deadline := time.Now().Add(limit)
	for {
		a, err := e.status(ctx, app)
		if err == nil && ok(a) {
			return nil
		}
		if time.Now().After(deadline) {
			if err != nil {
				return fmt.Errorf("app %q: not %s after %s: %w", app, what, limit, err)
			}
			return fmt.Errorf("app %q: not %s after %s (state %s, %d ready)", app, what, limit, a.State, a.Ready)
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(20 * time.Millisecond):
		}
	}
}

// countState counts the app's replicas in state.
func countState(a api.App, state string) int {
	n := 0
	for _, r := range a.Replicas {
		if r.State == state {
			n++
		}
	}
	return n
}

// request sends GET path to app through the proxy and returns the time to
// the first byte of the answer, the whole time and the body. An answer
// other than 200 is an error.
func (e *servingEnv) request(ctx context.Context, app, path string) (first, total time.Duration, body string, err error) {
	var t1 time.Time
	trace := &httptrace.ClientTrace{GotFirstResponseByte: func() { t1 = time.Now() }}
	req, err := http.NewRequestWithContext(httptrace.WithClientTrace(ctx, trace), "GET", "http://"+e.proxy+path, nil)
	if err != nil {
		return 0, 0, "", err
	}
	req.Host = app + ".localhost"
	t0 := time.Now()
	resp, err := e.client.Do(req)
	if err != nil {
		return 0, 0, "", fmt.Errorf("app %q: GET %s: %w", app, path, err)
	}
	b, err := io.ReadAll(resp.Body)
	resp.Body.Close()
	total = time.Since(t0)
	if err != nil {
		return 0, 0, "", fmt.Errorf("app %q: GET %s: %w", app, path, err)
	}
	if resp.StatusCode != http.StatusOK {
		return 0, 0, "", fmt.Errorf("app %q: GET %s: %s: %s", app, path, resp.Status, strings.TrimSpace(string(b)))
	}
	if t1.IsZero() {
		t1 = time.Now()
	}
	return t1.Sub(t0), total, string(b), nil
}

// fail counts a failed request of part.
func (e *servingEnv) fail(part string, n int) {
	e.mu.Lock()
	e.failures[part] += n
	e.mu.Unlock()
}

// close removes every app still deployed, stops the daemon and removes what
// it left behind, with the suite's cgroup parents.
func (e *servingEnv) close(ctx context.Context) error {
	var errs []string
	if e.client != nil {
		e.client.CloseIdleConnections()
	}
	e.mu.Lock()
	var names []string
	for n := range e.apps {
		names = append(names, n)
	}
	e.mu.Unlock()
	for _, n := range names {
		if err := e.remove(ctx, n); err != nil {
			errs = append(errs, err.Error())
		}
	}
	if e.d != nil {
		if err := e.d.close(ctx); err != nil {
			errs = append(errs, err.Error())
		}
		removeCgroups(e.d.net.cgroupParent)
	}
	if len(errs) > 0 {
		return fmt.Errorf("cleanup: %s", strings.Join(errs, "; "))
	}
	return nil
}
