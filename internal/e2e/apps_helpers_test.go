package e2e

import (
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/shoal-run/shoal/internal/api/types"
)

var (
	examplesOnce sync.Once
	examplesDir  string
	examplesErr  error
)

// examples returns the folder of the example apps' binaries: $SHOAL_EXAMPLES
// (set by make test), or a folder they are built into now.
func examples(t *testing.T) string {
	t.Helper()
	examplesOnce.Do(func() {
		if d := os.Getenv("SHOAL_EXAMPLES"); d != "" {
			examplesDir = d
			return
		}
		examplesDir, examplesErr = os.MkdirTemp("", "shoal-e2e-examples")
		if examplesErr != nil {
			return
		}
		for _, e := range []string{"hello", "slowboot", "cpuburn", "selfscale", "grpcecho"} {
			cmd := exec.Command("go", "build", "-o", filepath.Join(examplesDir, e, e), "github.com/shoal-run/shoal/examples/"+e)
			cmd.Env = append(os.Environ(), "CGO_ENABLED=0")
			if out, err := cmd.CombinedOutput(); err != nil {
				examplesErr = &buildError{e, string(out), err}
				return
			}
		}
	})
	if examplesErr != nil {
		t.Fatalf("example apps: %v", examplesErr)
	}
	return examplesDir
}

type buildError struct {
	name, out string
	err       error
}

func (e *buildError) Error() string { return "build " + e.name + ": " + e.err.Error() + "\n" + e.out }

// exampleImage builds example app name into the daemon's image store as
// name:1.
func (d *daemon) exampleImage(name string) {
	d.t.Helper()
	dir := filepath.Join(examples(d.t), name)
	d.must("image", "build", dir, "--tag", name+":1", "--entrypoint", "/"+name, "--port", "8080")
}

// proxyAddr is where the daemon's proxy listens.
func (d *daemon) proxyAddr() string {
	d.t.Helper()
	var h types.Health
	if err := json.Unmarshal([]byte(d.must("info", "--output", "json")), &h); err != nil {
		d.t.Fatalf("info: %v", err)
	}
	if h.Proxy == "" {
		d.t.Fatalf("info: no proxy address")
	}
	return h.Proxy
}

// deploy deploys a manifest and fails the test if it is refused.
func (d *daemon) deploy(manifest string) {
	d.t.Helper()
	f := filepath.Join(d.t.TempDir(), "shoal.toml")
	if err := os.WriteFile(f, []byte(manifest), 0o644); err != nil {
		d.t.Fatal(err)
	}
	d.must("app", "deploy", "-f", f)
}

// app returns the status of an app.
func (d *daemon) app(name string) types.App {
	d.t.Helper()
	var a types.App
	out := d.must("app", "status", name, "--output", "json")
	if err := json.Unmarshal([]byte(out), &a); err != nil {
		d.t.Fatalf("app status %s: %v\n%s", name, err, out)
	}
	return a
}

// appQuiet returns the status of an app, or an error (for use outside the
// test goroutine).
func (d *daemon) appQuiet(name string) (types.App, error) {
	var a types.App
	r := d.shoal("app", "status", name, "--output", "json")
	if r.code != 0 {
		return a, fmt.Errorf("app status %s: %s", name, r.stderr)
	}
	return a, json.Unmarshal([]byte(r.stdout), &a)
}

// replicasIn counts an app's replicas in state.
func replicasIn(a types.App, state string) int {
	n := 0
	for _, r := range a.Replicas {
		if r.State == state {
			n++
		}
	}
	return n
}

// waitApp polls the app's status until cond holds (at most a minute).
func (d *daemon) waitApp(name, what string, cond func(types.App) bool) types.App {
	d.t.Helper()
	deadline := time.Now().Add(time.Minute)
	for {
		a := d.app(name)
		if cond(a) {
			return a
		}
		if time.Now().After(deadline) {
			d.t.Fatalf("app %s: %s did not happen; status: %+v\ndaemon log:\n%s", name, what, a, d.log.String())
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// client sends requests to the proxy.
var client = &http.Client{Timeout: time.Minute, Transport: &http.Transport{MaxIdleConnsPerHost: 64, Proxy: nil}}

// get sends GET path to app through the proxy and returns the status code,
// the body and the replica that answered (hello's X-Replica).
func get(t *testing.T, proxy, app, path string) (int, string, string) {
	t.Helper()
	req, err := http.NewRequest(http.MethodGet, "http://"+proxy+path, nil)
	if err != nil {
		t.Fatal(err)
	}
	req.Host = app + ".localhost"
	resp, err := client.Do(req)
	if err != nil {
		t.Fatalf("GET %s through the proxy: %v", path, err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b), resp.Header.Get("X-Replica")
}

// ask sends GET path to app through the proxy and returns the replica that
// answered (hello's X-Replica, else the body) and, when the answer was not
// 200 or none came, why.
func ask(proxy, app, path string) (replica, failure string) {
	req, err := http.NewRequest(http.MethodGet, "http://"+proxy+path, nil)
	if err != nil {
		return "", err.Error()
	}
	req.Host = app + ".localhost"
	resp, err := client.Do(req)
	if err != nil {
		return "", err.Error()
	}
	b, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if replica = resp.Header.Get("X-Replica"); replica == "" {
		replica = strings.TrimSpace(string(b))
	}
	if resp.StatusCode != 200 {
		return replica, resp.Status + ": " + strings.TrimSpace(string(b))
	}
	return replica, ""
}

// load sends n requests with c at a time and returns how many did not
// answer 200, with the first failure.
func load(t *testing.T, proxy, app, path string, n, c int) (failed int, first string) {
	t.Helper()
	var mu sync.Mutex
	var wg sync.WaitGroup
	next := make(chan int)
	for w := 0; w < c; w++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for range next {
				if _, msg := ask(proxy, app, path); msg != "" {
					mu.Lock()
					if failed++; first == "" {
						first = msg
					}
					mu.Unlock()
				}
			}
		}()
	}
	for i := 0; i < n; i++ {
		next <- i
	}
	close(next)
	wg.Wait()
	return failed, first
}

// burst sends n requests to app at once (every one waits until all n
// goroutines are ready) and returns how many did not answer 200, the first
// failure, and how many requests each replica answered.
func burst(t *testing.T, proxy, app, path string, n int) (failed int, first string, by map[string]int) {
	t.Helper()
	var mu sync.Mutex
	var ready, done sync.WaitGroup
	by = map[string]int{}
	gate := make(chan struct{})
	for i := 0; i < n; i++ {
		ready.Add(1)
		done.Add(1)
		go func() {
			defer done.Done()
			ready.Done()
			<-gate
			rep, msg := ask(proxy, app, path)
			mu.Lock()
			defer mu.Unlock()
			if msg != "" {
				if failed++; first == "" {
					first = msg
				}
				return
			}
			by[rep]++
		}()
	}
	ready.Wait()
	close(gate)
	done.Wait()
	return failed, first, by
}

// steady is a load loop through the proxy: c workers send requests one
// after the other, pace apart, until stopped or until limit requests in all.
type steady struct {
	stop chan struct{}
	once sync.Once
	done sync.WaitGroup
	mu   sync.Mutex
	n    int
	// failed counts answers other than 200 and transport errors; first is
	// the first of them.
	failed int
	first  string
	// by counts answers per replica: hello's X-Replica, else the body.
	by map[string]int
}

func startSteady(proxy, app, path string, c, limit int, pace time.Duration) *steady {
	s := &steady{stop: make(chan struct{}), by: map[string]int{}}
	var sent atomic.Int64
	for w := 0; w < c; w++ {
		s.done.Add(1)
		go func() {
			defer s.done.Done()
			for sent.Add(1) <= int64(limit) {
				select {
				case <-s.stop:
					return
				default:
				}
				rep, msg := ask(proxy, app, path)
				s.mu.Lock()
				s.n++
				if msg != "" {
					if s.failed++; s.first == "" {
						s.first = msg
					}
				} else {
					s.by[rep]++
				}
				s.mu.Unlock()
				time.Sleep(pace)
			}
		}()
	}
	return s
}

// answered is how many requests replica id has answered so far.
func (s *steady) answered(id string) int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.by[id]
}

// end stops the loop and waits for its last requests; it may be called
// more than once.
func (s *steady) end() {
	s.once.Do(func() { close(s.stop) })
	s.done.Wait()
}

// slowRequest sends GET /?ms=ms to app through the proxy in the
// background; the channel gets the answer's status, or the error.
func slowRequest(proxy, app string, ms int) <-chan string {
	return slowRequestWithin(proxy, app, ms, client)
}

// slowRequestWithin is slowRequest through client c (whose timeout bounds
// the request).
func slowRequestWithin(proxy, app string, ms int, c *http.Client) <-chan string {
	return requestInFlight(proxy, app, fmt.Sprintf("/?ms=%d", ms), c)
}

// sleepRequest sends hello's /sleep?ms=ms through the proxy in the
// background and delivers its status: a request in flight for ms of wall
// time that uses no CPU.
func sleepRequest(proxy, app string, ms int) <-chan string {
	return requestInFlight(proxy, app, fmt.Sprintf("/sleep?ms=%d", ms), client)
}

// requestInFlight sends GET target to app through the proxy with c in the
// background and delivers the answer's status, or the error.
func requestInFlight(proxy, app, target string, c *http.Client) <-chan string {
	done := make(chan string, 1)
	go func() {
		req, _ := http.NewRequest(http.MethodGet, "http://"+proxy+target, nil)
		req.Host = app + ".localhost"
		resp, err := c.Do(req)
		if err != nil {
			done <- err.Error()
			return
		}
		resp.Body.Close()
		done <- resp.Status
	}()
	return done
}

// waitFor polls cond until it holds (at most a minute).
func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(time.Minute)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("%s did not happen", what)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// parseEvents reads the output of `shoal events --output json`: one event
// a line.
func parseEvents(t *testing.T, out string) []types.Event {
	t.Helper()
	var evs []types.Event
	for _, l := range strings.Split(strings.TrimSpace(out), "\n") {
		if l == "" {
			continue
		}
		var e types.Event
		if err := json.Unmarshal([]byte(l), &e); err != nil {
			t.Fatalf("events --output json: line %q: %v", l, err)
		}
		evs = append(evs, e)
	}
	return evs
}
