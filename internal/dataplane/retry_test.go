package dataplane

import (
	"bytes"
	"context"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/shoal-run/shoal/internal/clock"
	"github.com/shoal-run/shoal/internal/proxy"
	"github.com/shoal-run/shoal/internal/route"
)

// flakyProxy is a proxy process's control API behind a socket whose route
// calls the test drops (the connection closed unanswered) or holds.
type flakyProxy struct {
	sock string

	mu   sync.Mutex
	ctl  *control
	drop int                             // route calls still to drop
	hold func(r *http.Request) chan bool // a channel to wait on before serving r; nil: none
	seen atomic.Int32                    // route calls that came
}

func newFlakyProxy(t *testing.T) *flakyProxy {
	t.Helper()
	f := &flakyProxy{sock: filepath.Join(t.TempDir(), "control.sock")}
	f.ctl = f.freshControl(t)
	l, err := net.Listen("unix", f.sock)
	if err != nil {
		t.Fatal(err)
	}
	srv := &http.Server{Handler: http.HandlerFunc(f.serve)}
	go srv.Serve(l)
	t.Cleanup(func() { srv.Close() })
	return f
}

// freshControl is the control of a new proxy process: an empty table.
func (f *flakyProxy) freshControl(t *testing.T) *control {
	p := proxy.New(proxy.Options{Logger: slog.New(slog.DiscardHandler)})
	t.Cleanup(func() { p.Close() })
	return newControl(p, Info{}, nil, func(time.Duration) {}, slog.New(slog.DiscardHandler))
}

func (f *flakyProxy) serve(w http.ResponseWriter, r *http.Request) {
	if strings.HasPrefix(r.URL.Path, "/v1/routes") {
		f.seen.Add(1)
		// The body is read first: a held call is served after its
		// caller gave up on it, as a loaded proxy does.
		b, _ := io.ReadAll(r.Body)
		r.Body = io.NopCloser(bytes.NewReader(b))
		f.mu.Lock()
		drop := f.drop > 0
		if drop {
			f.drop--
		}
		var hold chan bool
		if f.hold != nil {
			hold = f.hold(r)
		}
		f.mu.Unlock()
		if drop {
			conn, _, err := w.(http.Hijacker).Hijack()
			if err == nil {
				conn.Close()
			}
			return
		}
		if hold != nil {
			<-hold
		}
	}
	f.mu.Lock()
	h := f.ctl.handler()
	f.mu.Unlock()
	h.ServeHTTP(w, r)
}

// route is the proxy's route of app ("" when it has none): its endpoints' IDs.
func (f *flakyProxy) route(app string) string {
	f.mu.Lock()
	ctl := f.ctl
	f.mu.Unlock()
	ctl.mu.Lock()
	defer ctl.mu.Unlock()
	rt, ok := ctl.routes[app]
	if !ok {
		return ""
	}
	var ids []string
	for _, e := range rt.Endpoints {
		ids = append(ids, e.ID)
	}
	return strings.Join(ids, ",")
}

func routeTo(app, id string) route.Route {
	return route.Route{App: app, Endpoints: []route.Endpoint{{ID: id, Addr: "127.0.0.1:9"}}}
}

// advanceUntil moves the fake clock on, a retry's longest wait at a time,
// until cond holds.
func advanceUntil(t *testing.T, fc *clock.Fake, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(60 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("%s: not after a minute of retries", what)
		}
		if fc.Timers() > 0 {
			fc.Advance(retryMax)
		}
		time.Sleep(time.Millisecond)
	}
}

// A route change the proxy did not take (its calls dropped) is sent again
// with back-off until it arrives, without waiting for a whole push.
func TestRouteChangeRetriedUntilItArrives(t *testing.T) {
	f := newFlakyProxy(t)
	f.drop = 3
	fc := clock.NewFake(time.Now())
	c := newClient(unixClient(f.sock, 0), slog.New(slog.DiscardHandler), fc)
	c.SetRoute(routeTo("a", "a-1"))
	if got := f.route("a"); got != "" {
		t.Fatalf("a dropped call was applied: %q", got)
	}
	advanceUntil(t, fc, "the route change taken and known taken", func() bool {
		c.mu.Lock()
		defer c.mu.Unlock()
		return f.route("a") == "a-1" && len(c.pending) == 0 && !c.retry
	})
	if n := f.seen.Load(); n != 4 || c.broken.Load() {
		t.Errorf("%d route calls, want 4 (3 dropped, 1 taken); broken %v", n, c.broken.Load())
	}
}

// A route call the proxy takes only after its caller gave up on it (and
// after a newer change of the app) never undoes the newer one; nor does a
// removal undo a later route, nor a whole table an app's newer change.
func TestDelayedRouteChangeNeverUndoesANewerOne(t *testing.T) {
	f := newFlakyProxy(t)
	release := make(chan bool)
	f.hold = func(r *http.Request) chan bool {
		if r.Method == http.MethodPut && r.URL.Path == "/v1/routes/a" && f.seen.Load() == 1 {
			return release
		}
		return nil
	}
	fc := clock.NewFake(time.Now())
	c := newClient(unixClient(f.sock, 0), slog.New(slog.DiscardHandler), fc)
	c.timeout = 100 * time.Millisecond
	c.SetRoute(routeTo("a", "a-1")) // held, given up on
	c.SetRoute(routeTo("a", "a-2"))
	if got := f.route("a"); got != "a-2" {
		t.Fatalf("route of a: %q, want a-2", got)
	}
	close(release) // the proxy gets to the first call at last
	deadline := time.Now().Add(30 * time.Second)
	for f.seen.Load() < 2 || f.route("a") == "" {
		if time.Now().After(deadline) {
			t.Fatal("the held call was not served")
		}
		time.Sleep(time.Millisecond)
	}
	advanceUntil(t, fc, "no change pending", func() bool {
		c.mu.Lock()
		defer c.mu.Unlock()
		return len(c.pending) == 0 && !c.retry
	})
	if got := f.route("a"); got != "a-2" {
		t.Fatalf("a change given up on and taken late undid a newer one: route of a %q, want a-2", got)
	}

	// The same rules on the proxy's side, call by call.
	ctl := f.freshControl(t)
	h := ctl.handler()
	call := func(method, path, body string) (applied string) {
		t.Helper()
		w := httptest.NewRecorder()
		h.ServeHTTP(w, httptest.NewRequest(method, path, strings.NewReader(body)))
		if w.Code != http.StatusNoContent {
			t.Fatalf("%s %s: %d %s", method, path, w.Code, w.Body)
		}
		return w.Header().Get(headerApplied)
	}
	a1, a2 := `{"app":"a","endpoints":[{"id":"a-1","addr":"127.0.0.1:9"}]}`, `{"app":"a","endpoints":[{"id":"a-2","addr":"127.0.0.1:9"}]}`
	if call("PUT", "/v1/routes/a?version=5", a1) != "1" || call("DELETE", "/v1/routes/a?version=7", "") != "1" ||
		call("PUT", "/v1/routes/a?version=6", a2) != "0" {
		t.Fatal("a stale change was applied")
	}
	if _, ok := ctl.routes["a"]; ok {
		t.Fatal("a change older than a removal brought the app back")
	}
	// The change at 7 sent again is answered applied, and applied once:
	// whatever comes at 7 again does not undo it.
	if call("DELETE", "/v1/routes/a?version=7", "") != "1" || call("PUT", "/v1/routes/a?version=7", a2) != "1" {
		t.Fatal("the change last applied, sent again, was answered stale")
	}
	if _, ok := ctl.routes["a"]; ok {
		t.Fatal("a change at the version of the removal brought the app back")
	}
	call("PUT", "/v1/routes/b?version=9", `{"app":"b"}`)
	if call("PUT", "/v1/routes?version=8", "["+a1+"]") != "1" {
		t.Fatal("a whole table newer than its floor was refused")
	}
	if _, ok := ctl.routes["b"]; !ok || ctl.routes["a"].Endpoints[0].ID != "a-1" {
		t.Fatalf("a whole table at 8 dropped b's change at 9, or did not set a: %v", ctl.routes)
	}
	if call("PUT", "/v1/routes/a?version=8", a2) != "0" || call("PUT", "/v1/routes?version=3", "[]") != "0" {
		t.Fatal("a change at or below the whole table's version was applied")
	}
	if call("PUT", "/v1/routes/a", a2) != "1" || ctl.routes["a"].Endpoints[0].ID != "a-2" {
		t.Fatal("a change without a version (an older daemon's) was not applied")
	}
}

// A change the proxy took only after its caller gave up on it, sent again
// at the same version, is the same change: the proxy answers it applied,
// and the client pushes no whole table for it.
func TestRouteChangeTakenLateAndSentAgainIsNoStaleOne(t *testing.T) {
	f := newFlakyProxy(t)
	release := make(chan bool)
	var wholes int // under f.mu
	f.hold = func(r *http.Request) chan bool {
		if r.Method == http.MethodPut && r.URL.Path == "/v1/routes" {
			wholes++
		}
		if r.Method == http.MethodPut && r.URL.Path == "/v1/routes/a" && f.seen.Load() == 1 {
			return release
		}
		return nil
	}
	fc := clock.NewFake(time.Now())
	c := newClient(unixClient(f.sock, 0), slog.New(slog.DiscardHandler), fc)
	t.Cleanup(c.Close)
	c.timeout = 100 * time.Millisecond
	c.SetRoute(routeTo("a", "a-1")) // held, given up on
	close(release)                  // then taken
	deadline := time.Now().Add(30 * time.Second)
	for f.route("a") == "" {
		if time.Now().After(deadline) {
			t.Fatal("the held call was not served")
		}
		time.Sleep(time.Millisecond)
	}
	advanceUntil(t, fc, "no change pending", func() bool {
		c.mu.Lock()
		defer c.mu.Unlock()
		return len(c.pending) == 0 && !c.retry
	})
	f.mu.Lock()
	n := wholes
	f.mu.Unlock()
	if n != 0 || f.seen.Load() != 2 {
		t.Fatalf("%d whole-table pushes and %d route calls after a change sent again once taken, want 0 and 2", n, f.seen.Load())
	}
}

// A proxy that answers with an older table than the client pushed (a new
// process) gets the whole table again; one that holds newer versions (an
// earlier daemon's) gets it numbered above them.
func TestRouteTableResyncedWhenTheProxyLostIt(t *testing.T) {
	f := newFlakyProxy(t)
	fc := clock.NewFake(time.Now())
	c := newClient(unixClient(f.sock, 0), slog.New(slog.DiscardHandler), fc)
	c.SetRoute(routeTo("a", "a-1"))
	if err := c.Sync(); err != nil {
		t.Fatal(err)
	}
	f.mu.Lock()
	f.ctl = f.freshControl(t) // the proxy process was replaced
	f.mu.Unlock()
	c.SetRoute(routeTo("b", "b-1"))
	advanceUntil(t, fc, "the whole table pushed again", func() bool { return f.route("a") == "a-1" && f.route("b") == "b-1" })

	// A daemon restarted with a clock behind its predecessor's versions.
	old := newClient(unixClient(f.sock, 0), slog.New(slog.DiscardHandler), clock.NewFake(time.Now().Add(time.Hour)))
	old.SetRoute(routeTo("c", "c-1"))
	if err := old.Sync(); err != nil {
		t.Fatal(err)
	}
	c.SetRoute(routeTo("c", "c-2"))
	advanceUntil(t, fc, "the table numbered above the proxy's", func() bool { return f.route("c") == "c-2" && f.route("a") == "a-1" })
}

// A wake-up the daemon refuses (an error status) or does not answer is
// sent again with back-off while requests wait: it is never taken for
// delivered.
func TestWakeUpRetriedWhenRefused(t *testing.T) {
	sock := filepath.Join(t.TempDir(), "api.sock")
	l, err := net.Listen("unix", sock)
	if err != nil {
		t.Fatal(err)
	}
	var calls atomic.Int32
	srv := &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		switch calls.Add(1) {
		case 1:
			http.Error(w, "busy", http.StatusServiceUnavailable)
		case 2:
			conn, _, _ := w.(http.Hijacker).Hijack()
			conn.Close()
		default:
			w.WriteHeader(http.StatusAccepted)
		}
	})}
	go srv.Serve(l)
	t.Cleanup(func() { srv.Close() })
	a := newActivator(sock, slog.New(slog.DiscardHandler))
	t.Cleanup(a.close)
	fc := clock.NewFake(time.Now())
	a.clock = fc
	a.queued = func(string) bool { return true }
	a.Activate("cold")
	deadline := time.Now().Add(60 * time.Second)
	for calls.Load() < 3 {
		if time.Now().After(deadline) {
			t.Fatalf("%d wake-up calls, want 3 (refused, dropped, taken)", calls.Load())
		}
		if fc.Timers() > 0 {
			fc.Advance(activateRetryMax)
		}
		time.Sleep(time.Millisecond)
	}
	// Taken: no more calls.
	for {
		a.mu.Lock()
		n := len(a.state)
		a.mu.Unlock()
		if n == 0 {
			break
		}
		time.Sleep(time.Millisecond)
	}
	if n := calls.Load(); n != 3 {
		t.Errorf("%d wake-up calls, want 3", n)
	}
}

// A proxy slower to answer a load read than the read's time is read in
// the end: each background read that did not finish in time gives the
// next twice as long.
func TestLoadReadInTheEndWhenSlow(t *testing.T) {
	sock := filepath.Join(t.TempDir(), "control.sock")
	l, err := net.Listen("unix", sock)
	if err != nil {
		t.Fatal(err)
	}
	var reads atomic.Int32
	srv := &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		reads.Add(1)
		time.Sleep(300 * time.Millisecond) // a proxy under load
		w.Write([]byte(`{"a":{"queued":3}}`))
	})}
	go srv.Serve(l)
	t.Cleanup(func() { srv.Close() })
	c := newClient(unixClient(sock, 0), slog.New(slog.DiscardHandler), clock.NewFake(time.Now()))
	c.timeout = 100 * time.Millisecond
	deadline := time.Now().Add(60 * time.Second)
	for {
		c.loadMu.Lock()
		got, refreshing := c.load["a"], c.refreshing
		if !refreshing {
			c.refreshLocked()
		}
		c.loadMu.Unlock()
		if got.Queued == 3 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the load was never read in %d reads", reads.Load())
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// lateAnswers is a transport whose answers to the calls it picks reach
// the client only once the test lets them.
type lateAnswers struct {
	rt      http.RoundTripper
	pick    func(r *http.Request) bool
	held    chan struct{} // the answer came and is held
	release chan struct{}
}

func (l *lateAnswers) RoundTrip(r *http.Request) (*http.Response, error) {
	resp, err := l.rt.RoundTrip(r)
	if err == nil && l.pick(r) {
		l.held <- struct{}{}
		<-l.release
	}
	return resp, err
}

// An answer the proxy gave before it took a whole table, read by the
// client after that table's push ended, is no sign that the proxy lost
// its table: the client compares it with the table it knew taken when it
// made the call.
func TestRouteAnswerOlderThanTheSyncIsNoLostTable(t *testing.T) {
	f := newFlakyProxy(t)
	var wholes int // under f.mu
	f.hold = func(r *http.Request) chan bool {
		if r.Method == http.MethodPut && r.URL.Path == "/v1/routes" {
			wholes++
		}
		return nil
	}
	hc := unixClient(f.sock, 0)
	late := &lateAnswers{rt: hc.Transport, held: make(chan struct{}), release: make(chan struct{}),
		pick: func(r *http.Request) bool { return r.URL.Path == "/v1/routes/a" }}
	hc.Transport = late
	fc := clock.NewFake(time.Now())
	c := newClient(hc, slog.New(slog.DiscardHandler), fc)
	t.Cleanup(c.Close)
	c.timeout = time.Minute
	done := make(chan struct{})
	go func() {
		defer close(done)
		c.SetRoute(routeTo("a", "a-1"))
	}()
	<-late.held // answered with the table the proxy had: none
	if err := c.Sync(); err != nil {
		t.Fatal(err)
	}
	close(late.release)
	<-done
	if c.broken.Load() {
		t.Fatal("an answer given before the whole table was taken read as a proxy that lost it")
	}
	f.mu.Lock()
	n := wholes
	f.mu.Unlock()
	if n != 1 || f.route("a") != "a-1" {
		t.Fatalf("%d whole-table pushes, want 1; route of a %q", n, f.route("a"))
	}
}

// Close ends the retry loop of a client whose changes never reach the
// proxy, and its timer with it; nothing is sent again after.
func TestCloseEndsTheRetryLoop(t *testing.T) {
	f := newFlakyProxy(t)
	f.drop = 1 << 30
	fc := clock.NewFake(time.Now())
	c := newClient(unixClient(f.sock, 0), slog.New(slog.DiscardHandler), fc)
	c.SetRoute(routeTo("a", "a-1"))
	deadline := time.Now().Add(30 * time.Second)
	for f.seen.Load() < 3 { // sent again: the loop runs
		if time.Now().After(deadline) {
			t.Fatal("the change was not sent again")
		}
		if fc.Timers() > 0 {
			fc.Advance(retryMax)
		}
		time.Sleep(time.Millisecond)
	}
	c.Close()
	for {
		c.mu.Lock()
		running := c.retry
		c.mu.Unlock()
		if !running && fc.Timers() == 0 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the retry loop runs on after Close (%d timers)", fc.Timers())
		}
		time.Sleep(time.Millisecond)
	}
	n := f.seen.Load()
	c.SetRoute(routeTo("a", "a-2")) // fails at once, and starts no loop
	fc.Advance(time.Hour)
	c.mu.Lock()
	running := c.retry
	c.mu.Unlock()
	if running || fc.Timers() != 0 || f.seen.Load() != n {
		t.Fatalf("after Close: retry loop %v, %d timers, %d route calls more", running, fc.Timers(), f.seen.Load()-n)
	}
}

// An ACME challenge set while a whole table's push waits on a loaded
// proxy reaches the proxy at once: the push does not hold it back.
func TestChallengesNotHeldBehindAWholePush(t *testing.T) {
	f := newFlakyProxy(t)
	release := make(chan bool)
	f.hold = func(r *http.Request) chan bool {
		if r.Method == http.MethodPut && r.URL.Path == "/v1/routes" {
			return release
		}
		return nil
	}
	fc := clock.NewFake(time.Now())
	c := newClient(unixClient(f.sock, 0), slog.New(slog.DiscardHandler), fc)
	t.Cleanup(c.Close)
	c.timeout = time.Minute
	synced := make(chan error, 1)
	go func() { synced <- c.Sync() }()
	deadline := time.Now().Add(30 * time.Second)
	for f.seen.Load() < 1 { // the whole table is held
		if time.Now().After(deadline) {
			t.Fatal("the whole table was not sent")
		}
		time.Sleep(time.Millisecond)
	}
	set := make(chan error, 1)
	go func() {
		set <- c.SetChallenges(context.Background(), []proxy.Challenge{{Type: proxy.HTTP01, Domain: "www.example.test", Token: "tok", KeyAuth: "tok.k"}})
	}()
	select {
	case err := <-set:
		if err != nil {
			t.Fatal(err)
		}
	case <-time.After(30 * time.Second):
		close(release)
		t.Fatal("the challenges waited for the whole table's push")
	}
	close(release)
	if err := <-synced; err != nil {
		t.Fatal(err)
	}
}
