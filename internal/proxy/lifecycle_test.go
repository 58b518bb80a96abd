package proxy

import (
	"context"
	"errors"
	"io"
	"net/http"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/shoal-run/shoal/internal/clock"
	"github.com/shoal-run/shoal/internal/route"
)

// activator records wake-ups.
type activator struct{ calls chan string }

func newActivator() *activator { return &activator{calls: make(chan string, 1000)} }

func (a *activator) Activate(app string) { a.calls <- app }

func coldRoute(app string) route.Route { return route.Route{App: app} }

func TestActivationReleasesOnSetRoute(t *testing.T) {
	fake := clock.NewFake(time.Unix(1000, 0))
	act := newActivator()
	f := newFront(t, Options{Activator: act, Clock: fake})
	f.p.SetRoute(coldRoute("a"))

	done := f.goDo(f.req(t, "GET", "a.localhost", "/", nil))
	if app := recv(t, act.calls, "Activate"); app != "a" {
		t.Fatalf("Activate(%q)", app)
	}
	eventually(t, "the request to queue", func() bool { return f.p.Load("a").Queued == 1 })
	select {
	case r := <-done:
		t.Fatalf("request answered while the app had no endpoint: %+v", r)
	default:
	}
	// The fake clock never moves: only the route change can release the
	// request, and the one timer is the queue timeout.
	if n := fake.Timers(); n != 1 {
		t.Fatalf("%d timers armed, want only the queue timeout", n)
	}
	f.p.SetRoute(routeTo("a", namedBackend(t, "woke")))
	r := recv(t, done, "the released request")
	if r.err != nil || r.code != 200 || r.body != "woke" {
		t.Fatalf("released request: %+v", r)
	}
	st := f.p.Load("a")
	if st.Queued != 0 || st.InFlight != 0 || st.Requests != 1 {
		t.Fatalf("stats after release: %+v", st)
	}
	// The one timer left is the sweep of the replica's idle connection.
	ep := (*f.p.apps.Load())["a"].eps["a-a"]
	eventually(t, "the replica connection back in the pool", func() bool {
		ep.pool.mu.Lock()
		defer ep.pool.mu.Unlock()
		return len(ep.pool.idle) == 1
	})
	if fake.Timers() != 1 {
		t.Fatal("queue timer left armed")
	}
	if n := counterValue(f.p.metrics.cold.WithLabelValues("a")); n != 1 {
		t.Fatalf("cold starts = %v, want 1", n)
	}
}

func TestQueueFull(t *testing.T) {
	act := newActivator()
	f := newFront(t, Options{Activator: act, Clock: clock.NewFake(time.Unix(0, 0))})
	r := coldRoute("a")
	r.QueueLimit = 2
	f.p.SetRoute(r)
	first := f.goDo(f.req(t, "GET", "a.localhost", "/", nil))
	second := f.goDo(f.req(t, "GET", "a.localhost", "/", nil))
	eventually(t, "two queued requests", func() bool { return f.p.Load("a").Queued == 2 })
	code, body, h := f.get(t, "a.localhost", "/")
	if code != 503 || h.Get("Retry-After") == "" {
		t.Fatalf("third request: %d %q Retry-After %q, want 503 with Retry-After", code, body, h.Get("Retry-After"))
	}
	apiError(t, body)
	f.p.SetRoute(routeTo("a", namedBackend(t, "a")))
	for _, ch := range []<-chan result{first, second} {
		if r := recv(t, ch, "a queued request"); r.code != 200 {
			t.Fatalf("queued request: %+v", r)
		}
	}
}

func TestQueueTimeout(t *testing.T) {
	fake := clock.NewFake(time.Unix(0, 0))
	f := newFront(t, Options{Activator: newActivator(), Clock: fake})
	r := coldRoute("a")
	r.QueueTimeout = 5 * time.Second
	f.p.SetRoute(r)
	done := f.goDo(f.req(t, "GET", "a.localhost", "/", nil))
	eventually(t, "the queue timer", func() bool { return fake.Timers() == 1 })
	fake.Advance(4 * time.Second)
	select {
	case r := <-done:
		t.Fatalf("answered before the timeout: %+v", r)
	default:
	}
	fake.Advance(time.Second)
	res := recv(t, done, "the timed-out request")
	if res.code != 503 || res.header.Get("Retry-After") == "" {
		t.Fatalf("timed out request: %+v, want 503 with Retry-After", res)
	}
	apiError(t, res.body)
	if st := f.p.Load("a"); st.Queued != 0 || st.InFlight != 0 {
		t.Fatalf("stats after timeout: %+v", st)
	}
}

// A request waits past the queue timeout while a start of its app is
// under way; the timeout counts from when none is.
func TestQueueTimeoutWaitsForStart(t *testing.T) {
	fake := clock.NewFake(time.Unix(0, 0))
	f := newFront(t, Options{Activator: newActivator(), Clock: fake})
	r := coldRoute("a")
	r.QueueTimeout = 5 * time.Second
	f.p.SetRoute(r)
	done := f.goDo(f.req(t, "GET", "a.localhost", "/", nil))
	eventually(t, "the queue timer", func() bool { return fake.Timers() == 1 })
	fake.Advance(4 * time.Second)
	r.Starting = 1
	f.p.SetRoute(r)
	eventually(t, "the queue timer stopped", func() bool { return fake.Timers() == 0 })
	fake.Advance(time.Minute)
	select {
	case r := <-done:
		t.Fatalf("answered while a start was under way: %+v", r)
	default:
	}
	f.p.SetRoute(routeTo("a", namedBackend(t, "started")))
	if res := recv(t, done, "the released request"); res.code != 200 || res.body != "started" {
		t.Fatalf("released request: %+v", res)
	}
}

// A start that ends without a ready replica answers the requests that
// waited for it at once, with Retry-After.
func TestFailedStartAnswersAtOnce(t *testing.T) {
	fake := clock.NewFake(time.Unix(0, 0))
	f := newFront(t, Options{Activator: newActivator(), Clock: fake})
	r := coldRoute("a")
	r.Starting = 1
	f.p.SetRoute(r)
	done := f.goDo(f.req(t, "GET", "a.localhost", "/", nil))
	eventually(t, "the request to queue", func() bool { return f.p.Load("a").Queued == 1 })
	r.Starting = 0
	f.p.SetRoute(r)
	res := recv(t, done, "the request after the failed start")
	if res.code != 503 || res.header.Get("Retry-After") == "" {
		t.Fatalf("request after a failed start: %+v, want 503 with Retry-After", res)
	}
	apiError(t, res.body)
}

func TestClientCancelLeavesQueue(t *testing.T) {
	f := newFront(t, Options{Activator: newActivator(), Clock: clock.NewFake(time.Unix(0, 0))})
	f.p.SetRoute(coldRoute("a"))
	ctx, cancel := context.WithCancel(context.Background())
	done := f.goDo(f.req(t, "GET", "a.localhost", "/", nil).WithContext(ctx))
	eventually(t, "the request to queue", func() bool { return f.p.Load("a").Queued == 1 })
	cancel()
	if r := recv(t, done, "the canceled request"); !errors.Is(r.err, context.Canceled) {
		t.Fatalf("canceled request: %+v", r)
	}
	eventually(t, "the queue to empty", func() bool {
		st := f.p.Load("a")
		return st.Queued == 0 && st.InFlight == 0
	})
}

func TestRemoveRouteReleasesWaiters(t *testing.T) {
	f := newFront(t, Options{Activator: newActivator(), Clock: clock.NewFake(time.Unix(0, 0))})
	f.p.SetRoute(coldRoute("a"))
	done := f.goDo(f.req(t, "GET", "a.localhost", "/", nil))
	eventually(t, "the request to queue", func() bool { return f.p.Load("a").Queued == 1 })
	f.p.Update(nil)
	if r := recv(t, done, "the waiting request"); r.code != 404 {
		t.Fatalf("waiting request of a removed app: %+v", r)
	}
}

func TestTableSwapKeepsLongRequest(t *testing.T) {
	f := newFront(t, Options{})
	release := make(chan struct{})
	started := make(chan struct{}, 1)
	slow := newBackend(t, func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/long" {
			w.Write([]byte("part1 "))
			w.(http.Flusher).Flush()
			started <- struct{}{}
			<-release
		}
		w.Write([]byte("done"))
	})
	other := namedBackend(t, "other")
	f.p.Update([]route.Route{routeTo("a", slow)})
	done := f.goDo(f.req(t, "GET", "a.localhost", "/long", nil))
	recv(t, started, "the long request")
	// Swap the table several ways: the long request's endpoint leaves the
	// route, the app moves, another app comes and goes.
	f.p.Update([]route.Route{routeTo("a", other), routeTo("b", other)})
	f.p.SetRoute(route.Route{App: "a", Endpoints: []route.Endpoint{{ID: "x", Addr: other.addr}}})
	f.p.RemoveRoute("b")
	f.p.Update([]route.Route{{App: "a", Endpoints: []route.Endpoint{{ID: "y", Addr: other.addr}}}})
	if code, body, _ := f.get(t, "a.localhost", "/"); code != 200 || body != "other" {
		t.Fatalf("new route: %d %q", code, body)
	}
	close(release)
	if r := recv(t, done, "the long request"); r.err != nil || r.code != 200 || r.body != "part1 done" {
		t.Fatalf("long request across table swaps: %+v", r)
	}
}

func TestClosedEndpointGetsNoNewRequests(t *testing.T) {
	f := newFront(t, Options{})
	e := namedBackend(t, "e")
	g := namedBackend(t, "g")
	f.p.SetRoute(route.Route{App: "a", Endpoints: []route.Endpoint{{ID: "E", Addr: e.addr}, {ID: "G", Addr: g.addr}}})

	ctx, cancel := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	var sent atomic.Int64
	for range 8 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for ctx.Err() == nil && sent.Load() < 20000 {
				resp, err := f.client.Do(f.req(t, "GET", "a.localhost", "/", nil))
				if err != nil {
					t.Errorf("request failed under route change: %v", err)
					return
				}
				io.Copy(io.Discard, resp.Body)
				resp.Body.Close()
				if resp.StatusCode != 200 {
					t.Errorf("status %d under route change", resp.StatusCode)
					return
				}
				sent.Add(1)
			}
		}()
	}
	eventually(t, "load on E", func() bool { return e.hits.Load() > 50 })
	f.p.SetRoute(route.Route{App: "a", Endpoints: []route.Endpoint{{ID: "G", Addr: g.addr}}})
	wctx, wcancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer wcancel()
	if err := f.p.WaitIdle(wctx, "E"); err != nil {
		t.Fatalf("WaitIdle(E): %v", err)
	}
	atE := e.hits.Load()
	before := g.hits.Load()
	eventually(t, "more load on G", func() bool { return g.hits.Load() > before+500 })
	cancel()
	wg.Wait()
	if n := e.hits.Load(); n != atE {
		t.Fatalf("E got %d requests after it was closed and idle", n-atE)
	}
	if _, ok := f.p.Load("a").Endpoints["E"]; ok {
		t.Error("closed idle endpoint still listed")
	}

	// E comes back: it is open again and keeps its counters.
	f.p.SetRoute(route.Route{App: "a", Endpoints: []route.Endpoint{{ID: "E", Addr: e.addr}}})
	if code, body, _ := f.get(t, "a.localhost", "/"); code != 200 || body != "e" {
		t.Fatalf("reopened E: %d %q", code, body)
	}
	if st := f.p.Load("a").Endpoints["E"]; st.Requests != uint64(atE)+1 {
		t.Fatalf("E counters: %+v, want %d requests", st, atE+1)
	}
}

func TestWaitIdleAfterInFlightRequest(t *testing.T) {
	fake := clock.NewFake(time.Unix(500, 0))
	f := newFront(t, Options{Clock: fake})
	release := make(chan struct{})
	started := make(chan struct{}, 1)
	e := newBackend(t, func(w http.ResponseWriter, r *http.Request) {
		started <- struct{}{}
		<-release
		io.WriteString(w, "slow")
	})
	g := namedBackend(t, "g")
	f.p.SetRoute(route.Route{App: "a", Endpoints: []route.Endpoint{{ID: "E", Addr: e.addr}}})
	done := f.goDo(f.req(t, "GET", "a.localhost", "/", nil))
	recv(t, started, "the request on E")
	f.p.SetRoute(route.Route{App: "a", Endpoints: []route.Endpoint{{ID: "G", Addr: g.addr}}})

	idle := make(chan error, 1)
	go func() { idle <- f.p.WaitIdle(context.Background(), "E") }()
	st := f.p.Load("a")
	if st.Endpoints["E"].InFlight != 1 {
		t.Fatalf("closed E with a request in flight: %+v", st.Endpoints)
	}
	select {
	case err := <-idle:
		t.Fatalf("WaitIdle returned (%v) while E had a request in flight", err)
	default:
	}
	if code, body, _ := f.get(t, "a.localhost", "/"); code != 200 || body != "g" {
		t.Fatalf("new request: %d %q", code, body)
	}
	fake.Advance(time.Second)
	close(release)
	if r := recv(t, done, "E's request"); r.code != 200 || r.body != "slow" {
		t.Fatalf("E's request: %+v", r)
	}
	if err := recv(t, idle, "WaitIdle"); err != nil {
		t.Fatal(err)
	}
	if err := f.p.WaitIdle(context.Background(), "unknown"); err != nil {
		t.Fatalf("WaitIdle(unknown) = %v", err)
	}
	// WaitIdle with a canceled context on a busy endpoint returns the error.
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	ep := f.p.endpoints["G"]
	ep.inFlight.Add(1)
	if err := f.p.WaitIdle(ctx, "G"); !errors.Is(err, context.Canceled) {
		t.Fatalf("WaitIdle on a busy endpoint with a canceled context = %v", err)
	}
	ep.inFlight.Add(-1)
	if got := f.p.Load("a").LastRequest; !got.Equal(time.Unix(501, 0)) {
		t.Fatalf("LastRequest = %v, want the fake time the last request ended", got)
	}
}
