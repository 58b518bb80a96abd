package kit

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

	"github.com/shoal-run/shoal/internal/api/types"
	"github.com/shoal-run/shoal/internal/bench"
)

// ServingEnv is a shoal daemon with the example images built and a client
// for its proxy.
type ServingEnv struct {
	Opts   bench.Options
	Dir    string
	Daemon *Daemon
	Proxy  string // host:port of the daemon's proxy
	// ProxyTLS is host:port of its HTTPS listener ("": the daemon runs
	// none, see DaemonNet.Args).
	ProxyTLS string
	client   *http.Client

	Mu   sync.Mutex      // guards Apps and Failures
	Apps map[string]bool // deployed and not yet removed

	Failures map[string]int // failed requests by part
	Tables   []bench.Table  // every table added, for the targets
}

// NewServingEnv starts a daemon on network n and builds the example apps
// named as images NAME:1.
func NewServingEnv(ctx context.Context, o bench.Options, dir string, n DaemonNet, examples ...string) (_ *ServingEnv, retErr error) {
	e := &ServingEnv{Opts: o, Dir: dir, Apps: map[string]bool{}, Failures: map[string]int{}}
	d, err := startDaemonOn(ctx, o.ShoalBin, filepath.Join(dir, "daemon"), n)
	if err != nil {
		return nil, err
	}
	e.Daemon = d
	defer func() {
		if retErr != nil {
			e.Close(context.WithoutCancel(ctx))
		}
	}()
	var info struct {
		Proxy    string `json:"proxy"`
		ProxyTLS string `json:"proxy_tls"`
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
	e.Proxy, e.ProxyTLS = info.Proxy, info.ProxyTLS
	e.client = &http.Client{Timeout: 60 * time.Second, Transport: &http.Transport{
		MaxIdleConnsPerHost: 64, IdleConnTimeout: time.Minute, DisableCompression: true,
	}}
	for _, app := range examples {
		bin, err := o.ExampleBinary(ctx, app, dir)
		if err != nil {
			return nil, err
		}
		src := filepath.Join(dir, "images", app)
		if err := CopyFileMode(bin, filepath.Join(src, app), 0o755); err != nil {
			return nil, err
		}
		if _, err := e.Daemon.CLI(ctx, "image", "build", src, "--tag", app+":1", "--entrypoint", "/"+app, "--port", "8080"); err != nil {
			return nil, err
		}
	}
	return e, nil
}

// output runs the shoal CLI and returns what it printed on stdout.
func (e *ServingEnv) output(ctx context.Context, args ...string) (string, error) {
	cmd := exec.CommandContext(ctx, e.Daemon.bin, args...)
	cmd.Env = append(os.Environ(), "SHOAL_HOST="+e.Daemon.host)
	var stderr strings.Builder
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		return "", fmt.Errorf("shoal %s: %w: %s", strings.Join(args, " "), err, strings.TrimSpace(stderr.String()))
	}
	return string(out), nil
}

// GetJSON decodes the answer of a GET on the daemon's API.
func (e *ServingEnv) GetJSON(ctx context.Context, path string, v any) error {
	resp, err := e.Daemon.Get(ctx, path)
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

// Status returns the app as `shoal app status NAME -o json` shows it, from
// the API directly (the CLI's start-up would dominate a 100 ms poll).
func (e *ServingEnv) Status(ctx context.Context, app string) (types.App, error) {
	var a types.App
	err := e.GetJSON(ctx, "/v1/apps/"+app, &a)
	return a, err
}

// Deploy writes a shoal.toml and runs `shoal app deploy -f`.
func (e *ServingEnv) Deploy(ctx context.Context, name, manifest string) error {
	path := filepath.Join(e.Dir, "manifests", name+".toml")
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		return err
	}
	if err := os.WriteFile(path, []byte(fmt.Sprintf("name = %q\n", name)+manifest), 0o644); err != nil {
		return err
	}
	e.Mu.Lock()
	e.Apps[name] = true
	e.Mu.Unlock()
	_, err := e.Daemon.CLI(ctx, "app", "deploy", "-f", path)
	return err
}

// Remove runs `shoal app rm NAME`.
func (e *ServingEnv) Remove(ctx context.Context, name string) error {
	_, err := e.Daemon.CLI(ctx, "app", "rm", name)
	if err == nil {
		e.Mu.Lock()
		delete(e.Apps, name)
		e.Mu.Unlock()
	}
	return err
}

// WaitFor polls the app's status every 20 ms until ok holds, or fails after
// limit.
func (e *ServingEnv) WaitFor(ctx context.Context, app string, limit time.Duration, what string, ok func(types.App) bool) error {
	deadline := time.Now().Add(limit)
	for {
		a, err := e.Status(ctx, app)
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

// CountState counts the app's replicas in state.
func CountState(a types.App, state string) int {
	n := 0
	for _, r := range a.Replicas {
		if r.State == state {
			n++
		}
	}
	return n
}

// Request sends GET path to app through the proxy and returns the time to
// the first byte of the answer, the whole time and the body. An answer
// other than 200 is an error.
func (e *ServingEnv) Request(ctx context.Context, app, path string) (first, total time.Duration, body string, err error) {
	var t1 time.Time
	trace := &httptrace.ClientTrace{GotFirstResponseByte: func() { t1 = time.Now() }}
	req, err := http.NewRequestWithContext(httptrace.WithClientTrace(ctx, trace), "GET", "http://"+e.Proxy+path, nil)
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

// Fail counts a failed request of part.
func (e *ServingEnv) Fail(part string, n int) {
	e.Mu.Lock()
	e.Failures[part] += n
	e.Mu.Unlock()
}

// Close removes every app still deployed, stops the daemon and removes what
// it left behind, with the suite's cgroup parents.
func (e *ServingEnv) Close(ctx context.Context) error {
	var errs []string
	if e.client != nil {
		e.client.CloseIdleConnections()
	}
	e.Mu.Lock()
	var names []string
	for n := range e.Apps {
		names = append(names, n)
	}
	e.Mu.Unlock()
	for _, n := range names {
		if err := e.Remove(ctx, n); err != nil {
			errs = append(errs, err.Error())
		}
	}
	if e.Daemon != nil {
		if err := e.Daemon.Close(ctx); err != nil {
			errs = append(errs, err.Error())
		}
		RemoveCgroups(e.Daemon.net.CgroupParent)
	}
	if len(errs) > 0 {
		return fmt.Errorf("cleanup: %s", strings.Join(errs, "; "))
	}
	return nil
}

// Table returns the table of the suite titled title.
func (e *ServingEnv) Table(title string) bench.Table {
	for _, t := range e.Tables {
		if t.Title == title {
			return t
		}
	}
	return bench.Table{Title: title}
}

// ReqRecord is one request of a load generator.
type ReqRecord struct {
	Start, End time.Time
	OK         bool
	Replica    string // the replica that answered (cpuburn names itself)
}
