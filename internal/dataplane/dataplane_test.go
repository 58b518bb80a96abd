package dataplane

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"log/slog"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/shoal-run/shoal/internal/route"
)

// served is a proxy process's Serve running in the test, with a client of
// its control socket.
type served struct {
	addr   string
	client *Client
	done   chan error
}

func serveInTest(t *testing.T, daemonAPI string) *served {
	t.Helper()
	dir := t.TempDir()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	ctlPath := filepath.Join(dir, ControlSocket)
	cl, err := net.Listen("unix", ctlPath)
	if err != nil {
		t.Fatal(err)
	}
	s := &served{addr: l.Addr().String(), client: NewClient(ctlPath, slog.New(slog.DiscardHandler)), done: make(chan error, 1)}
	ctx, cancel := context.WithCancel(context.Background())
	go func() {
		s.done <- Serve(ctx, ServeConfig{Listener: l, Control: cl, DaemonAPI: daemonAPI, Logger: slog.New(slog.DiscardHandler)})
	}()
	t.Cleanup(func() {
		cancel()
		<-s.done
	})
	return s
}

func (s *served) get(t *testing.T, app string) (int, string) {
	t.Helper()
	req, _ := http.NewRequest(http.MethodGet, "http://"+s.addr+"/", nil)
	req.Host = app + ".localhost"
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b)
}

func backend(t *testing.T, name string) string {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { io.WriteString(w, name) }))
	t.Cleanup(srv.Close)
	return strings.TrimPrefix(srv.URL, "http://")
}

// Routes set through the client reach the proxy process; Sync replaces the
// whole table; load, routes and metrics are read back.
func TestControlRoutesLoadMetrics(t *testing.T) {
	s := serveInTest(t, "")
	c := s.client
	info, err := c.Info(context.Background())
	if err != nil || info.Addr != s.addr || info.Pid == 0 {
		t.Fatalf("info: %+v %v", info, err)
	}
	c.SetRoute(route.Route{App: "a", Endpoints: []route.Endpoint{{ID: "a-1", Addr: backend(t, "one"), Revision: 1}},
		Weights: map[int]int{1: 100}, QueueTimeout: time.Second})
	if code, body := s.get(t, "a"); code != 200 || body != "one" {
		t.Fatalf("through the proxy: %d %q", code, body)
	}
	st := c.Load("a")
	if st.Requests != 1 {
		t.Fatalf("stats of a: %+v", st)
	}
	if err := c.WaitIdle(context.Background(), "a-1"); err != nil {
		t.Fatalf("wait idle: %v", err)
	}
	// A route the proxy has but the client never set goes at Sync.
	req, _ := http.NewRequest(http.MethodPut, "http://proxy/v1/routes/ghost", strings.NewReader(`{"App":"ghost"}`))
	resp, err := c.hc.Do(req)
	if err != nil || resp.StatusCode != http.StatusNoContent {
		t.Fatalf("put ghost: %v %v", err, resp)
	}
	resp.Body.Close()
	rs, err := c.Routes(context.Background())
	if err != nil || len(rs) != 2 {
		t.Fatalf("routes before sync: %+v %v", rs, err)
	}
	if err := c.Sync(); err != nil {
		t.Fatal(err)
	}
	rs, err = c.Routes(context.Background())
	if err != nil || len(rs) != 1 || rs[0].App != "a" || rs[0].Weights[1] != 100 || rs[0].QueueTimeout != time.Second {
		t.Fatalf("routes after sync: %+v %v", rs, err)
	}
	if code, _ := s.get(t, "ghost"); code != 404 {
		t.Fatalf("ghost after sync: %d", code)
	}
	fams, err := c.Gather()
	if err != nil {
		t.Fatal(err)
	}
	found := false
	for _, f := range fams {
		found = found || f.GetName() == "shoal_proxy_requests_total"
	}
	if !found {
		t.Fatalf("metrics lack shoal_proxy_requests_total: %d families", len(fams))
	}
	c.RemoveRoute("a")
	if code, _ := s.get(t, "a"); code != 404 {
		t.Fatalf("a after remove: %d", code)
	}
	if err := c.Shutdown(context.Background(), time.Second); err != nil {
		t.Fatalf("shutdown: %v", err)
	}
	select {
	case err := <-s.done:
		s.done <- err
	case <-time.After(10 * time.Second):
		t.Fatal("Serve did not return after shutdown")
	}
}

// A request for a cold app waits while the daemon's API is away; the wake-up
// is sent again until the daemon answers, and the request is then served.
func TestActivationRetriedUntilDaemonAnswers(t *testing.T) {
	api := filepath.Join(t.TempDir(), "api.sock")
	s := serveInTest(t, api)
	s.client.SetRoute(route.Route{App: "cold", QueueTimeout: time.Minute})
	done := make(chan string, 1)
	go func() {
		req, _ := http.NewRequest(http.MethodGet, "http://"+s.addr+"/", nil)
		req.Host = "cold.localhost"
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			done <- err.Error()
			return
		}
		b, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		done <- string(b)
	}()
	waitUntil(t, func() bool { return s.client.Load("cold").Queued == 1 })
	// The daemon comes back: its first wake-up call routes the app.
	var calls atomic.Int32
	l, err := net.Listen("unix", api)
	if err != nil {
		t.Fatal(err)
	}
	addr := backend(t, "woken")
	srv := &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path != "/v1/apps/cold/activate" || r.Method != http.MethodPost {
			http.Error(w, "unexpected", http.StatusNotFound)
			return
		}
		if calls.Add(1) == 1 {
			go s.client.SetRoute(route.Route{App: "cold", QueueTimeout: time.Minute,
				Endpoints: []route.Endpoint{{ID: "cold-1", Addr: addr}}})
		}
		w.WriteHeader(http.StatusAccepted)
	})}
	go srv.Serve(l)
	defer srv.Close()
	select {
	case body := <-done:
		if body != "woken" {
			t.Fatalf("held request: %q", body)
		}
	case <-time.After(30 * time.Second):
		t.Fatal("held request not answered after the daemon came back")
	}
}

func waitUntil(t *testing.T, cond func() bool) {
	t.Helper()
	for i := 0; !cond(); i++ {
		if i > 3000 {
			t.Fatal("condition not met")
		}
		time.Sleep(10 * time.Millisecond)
	}
}

func TestSameAddr(t *testing.T) {
	for _, c := range []struct {
		want, actual string
		same         bool
	}{
		{"127.0.0.1:8080", "127.0.0.1:8080", true},
		{"127.0.0.1:0", "127.0.0.1:41234", true},
		{"127.0.0.1:8080", "127.0.0.1:8081", false},
		{"localhost:8080", "127.0.0.1:8080", true},
		{":8080", "[::]:8080", true},
		{"0.0.0.0:8080", "0.0.0.0:8080", true},
		{"10.0.0.1:8080", "127.0.0.1:8080", false},
		{"8080", "127.0.0.1:8080", false},
	} {
		if got := sameAddr(c.want, c.actual); got != c.same {
			t.Errorf("sameAddr(%q, %q) = %v, want %v", c.want, c.actual, got, c.same)
		}
	}
}

// The cost of the control calls on a thaw's path: a route change, and the
// load of every app (here 10, with 2 endpoints each) in one call.
func BenchmarkControlCalls(b *testing.B) {
	dir := b.TempDir()
	l, _ := net.Listen("tcp", "127.0.0.1:0")
	ctlPath := filepath.Join(dir, ControlSocket)
	cl, _ := net.Listen("unix", ctlPath)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() {
		done <- Serve(ctx, ServeConfig{Listener: l, Control: cl, Logger: slog.New(slog.DiscardHandler)})
	}()
	defer func() { cancel(); <-done }()
	c := NewClient(ctlPath, slog.New(slog.DiscardHandler))
	for i := range 10 {
		c.SetRoute(route.Route{App: "app" + string(rune('a'+i)), Endpoints: []route.Endpoint{
			{ID: "r1-" + string(rune('a'+i)), Addr: "10.0.0.1:8080"}, {ID: "r2-" + string(rune('a'+i)), Addr: "10.0.0.2:8080"}}})
	}
	b.Run("SetRoute", func(b *testing.B) {
		for b.Loop() {
			c.SetRoute(route.Route{App: "appa", Endpoints: []route.Endpoint{{ID: "r1-a", Addr: "10.0.0.1:8080"}}})
		}
	})
	b.Run("LoadAll", func(b *testing.B) {
		for b.Loop() {
			var all map[string]route.Load
			if err := c.call(http.MethodGet, "/v1/load", nil, &all); err != nil || len(all) != 10 {
				b.Fatal(err, len(all))
			}
		}
	})
	b.Run("LoadOne", func(b *testing.B) {
		for b.Loop() {
			var st route.Load
			if err := c.call(http.MethodGet, "/v1/load/appa", nil, &st); err != nil {
				b.Fatal(err)
			}
		}
	})
}

// Load comes from one snapshot of every app while it is fresh; an old one
// is read again in the background, and after a quiet spell the app asked
// for is read alone.
func TestStatsSnapshot(t *testing.T) {
	s := serveInTest(t, "")
	c := s.client
	c.SetRoute(route.Route{App: "a", Endpoints: []route.Endpoint{{ID: "a-1", Addr: backend(t, "one")}}})
	if st := c.Load("a"); st.Requests != 0 {
		t.Fatalf("first read: %+v", st)
	}
	// The first read started a snapshot of every app.
	waitUntil(t, func() bool { c.loadMu.Lock(); defer c.loadMu.Unlock(); return c.load != nil && !c.refreshing })
	s.get(t, "a")
	c.loadMu.Lock()
	c.loadAt = time.Now() // fresh: the snapshot answers
	c.loadMu.Unlock()
	if st := c.Load("a"); st.Requests != 0 {
		t.Fatalf("a fresh snapshot read again: %+v", st)
	}
	c.loadMu.Lock()
	c.loadAt = time.Now().Add(-loadMaxAge) // old: answers, and is read again
	c.loadMu.Unlock()
	c.Load("a")
	waitUntil(t, func() bool { return c.Load("a").Requests == 1 })
	c.loadMu.Lock()
	c.loadAt = time.Now().Add(-loadBatchAfter) // too old: the app is read alone
	c.loadMu.Unlock()
	s.get(t, "a")
	if st := c.Load("a"); st.Requests != 2 {
		t.Fatalf("after a quiet spell: %+v", st)
	}
}

// Between reads of every app's load (loadFullEvery apart) the snapshot is
// refreshed with the apps whose load moved only: an app without requests
// is not read again, an app with one is.
func TestStatsSnapshotReadsMovedApps(t *testing.T) {
	s := serveInTest(t, "")
	c := s.client
	for _, app := range []string{"a", "b"} {
		c.SetRoute(route.Route{App: app, Endpoints: []route.Endpoint{{ID: app + "-1", Addr: backend(t, app)}}})
	}
	c.Load("a")
	waitUntil(t, func() bool { c.loadMu.Lock(); defer c.loadMu.Unlock(); return c.load != nil && !c.refreshing })
	s.get(t, "b")
	c.loadMu.Lock()
	c.load["a"] = route.Load{Requests: 99} // what a read of a would change
	c.loadAt = time.Now().Add(-loadMaxAge)
	c.loadMu.Unlock()
	c.Load("a")
	waitUntil(t, func() bool { return c.Load("b").Requests == 1 })
	if st := c.Load("a"); st.Requests != 99 {
		t.Fatalf("an app without requests was read again between full reads: %+v", st)
	}
	// Past loadFullEvery, every app is read.
	c.loadMu.Lock()
	c.fullAt = time.Now().Add(-loadFullEvery)
	c.loadAt = time.Now().Add(-loadMaxAge)
	c.loadMu.Unlock()
	c.Load("a")
	waitUntil(t, func() bool { return c.Load("a").Requests == 0 })
}

// A proxy process that cannot start leaves no control socket behind, and
// the error names the process's log.
func TestOpenFailedStartLeavesNoSocket(t *testing.T) {
	dir := t.TempDir()
	_, err := Open(context.Background(), Options{Addr: "127.0.0.1:0", RunDir: dir, Exe: "/bin/false"})
	if err == nil || !strings.Contains(err.Error(), "exited at start") {
		t.Fatalf("open with a proxy that exits at once: %v", err)
	}
	if _, err := os.Lstat(filepath.Join(dir, ControlSocket)); !errors.Is(err, fs.ErrNotExist) {
		t.Fatalf("control socket left behind: %v", err)
	}
}

// Two proxy processes of one cluster: the hop key and node reach each
// over its control socket, routes carry the endpoints' nodes, and a
// request on the node without the replica is served by the other's,
// also after a Sync; a forged hop header is refused.
func TestHopBetweenProxyProcesses(t *testing.T) {
	s1, s2 := serveInTest(t, ""), serveInTest(t, "")
	key := []byte("cluster secret")
	for i, s := range []*served{s1, s2} {
		if err := s.client.SetHop([]string{"n1", "n2"}[i], key); err != nil {
			t.Fatal(err)
		}
	}
	s2.client.SetRoute(route.Route{App: "a", Endpoints: []route.Endpoint{{ID: "a-2", Addr: backend(t, "two"), Node: "n2"}}})
	s1.client.SetRoute(route.Route{App: "a", Endpoints: []route.Endpoint{{ID: "a-2", Addr: s2.addr, Node: "n2"}}})
	for range 2 {
		if code, body := s1.get(t, "a"); code != 200 || body != "two" {
			t.Fatalf("through n1: %d %q; want n2's replica", code, body)
		}
		if err := s1.client.Sync(); err != nil {
			t.Fatal(err)
		}
	}
	req, _ := http.NewRequest(http.MethodGet, "http://"+s2.addr+"/", nil)
	req.Host = "a.localhost"
	req.Header.Set("Shoal-Hop", "a-2 00")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusForbidden {
		t.Fatalf("forged hop: %d; want 403", resp.StatusCode)
	}
	if l := s1.client.Loads(); l["a"].Requests != 2 {
		t.Fatalf("n1's loads %+v; want 2 requests of a", l)
	}
}

// A caller of wait-idle that goes away (a daemon killed during a drain)
// cuts nothing: an answer still streaming from the drained endpoint goes
// on. When the client's WaitIdle ends with its context (the drain's grace
// is over), the proxy cuts the answer.
func TestDrainCutOnlyWhenGraceIsOver(t *testing.T) {
	s := serveInTest(t, "")
	c := s.client
	more := make(chan struct{})
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "text/event-stream")
		for {
			io.WriteString(w, "data: tick\n\n")
			w.(http.Flusher).Flush()
			select {
			case <-more:
			case <-r.Context().Done():
				return
			}
		}
	}))
	t.Cleanup(srv.Close)
	c.SetRoute(route.Route{App: "a", Endpoints: []route.Endpoint{{ID: "a-1", Addr: strings.TrimPrefix(srv.URL, "http://"), Revision: 1}},
		Weights: map[int]int{1: 100}})
	req, _ := http.NewRequest(http.MethodGet, "http://"+s.addr+"/sse", nil)
	req.Host = "a.localhost"
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	lines := make(chan string)
	ended := make(chan error, 1)
	go func() {
		br := bufio.NewReader(resp.Body)
		for {
			l, err := br.ReadString('\n')
			if err != nil {
				ended <- err
				return
			}
			if l != "\n" {
				lines <- l
			}
		}
	}()
	tick := func(what string) {
		t.Helper()
		select {
		case <-lines:
		case err := <-ended:
			t.Fatalf("the stream ended %s: %v", what, err)
		case <-time.After(10 * time.Second):
			t.Fatalf("no event %s", what)
		}
	}
	tick("at first")
	c.SetRoute(route.Route{App: "a", Weights: map[int]int{1: 100}}) // a-1 leaves the route and drains

	// A wait-idle whose caller goes away once the proxy holds it.
	gone, leave := context.WithCancel(context.Background())
	wreq, _ := http.NewRequestWithContext(gone, http.MethodPost, "http://proxy/v1/endpoints/a-1/wait-idle", nil)
	waited := make(chan error, 1)
	go func() {
		resp, err := c.hc.Do(wreq)
		if err == nil {
			resp.Body.Close()
		}
		waited <- err
	}()
	select {
	case err := <-waited:
		t.Fatalf("wait-idle returned (%v) with the stream open", err)
	case <-time.After(200 * time.Millisecond): // setup: the call is at the proxy
	}
	leave()
	<-waited
	for i := range 5 {
		more <- struct{}{}
		tick(fmt.Sprintf("%d after the wait-idle's caller went away", i+1))
	}

	// The grace is over.
	over, graceOver := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- c.WaitIdle(over, "a-1") }()
	more <- struct{}{}
	tick("during the drain")
	graceOver()
	if err := <-done; err == nil {
		t.Fatal("WaitIdle cut short returned no error")
	}
	select {
	case err := <-ended:
		if !errors.Is(err, io.ErrUnexpectedEOF) {
			t.Fatalf("the stream ended with %v, want it cut short", err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("the stream goes on after the drain's grace")
	}
}
