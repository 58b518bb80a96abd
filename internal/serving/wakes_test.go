package serving

import (
	"context"
	"fmt"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"sync/atomic"
	"testing"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/shoal-run/shoal/internal/proxy"
	"github.com/shoal-run/shoal/internal/route"
)

// A wake-up that comes while the daemon starts, before the app's
// controller is loaded, is kept and reaches the controller: the proxy,
// which had its 202, does not ask again, and its load (read before the
// request came) shows nothing waiting, yet the app starts a replica.
func TestWakeBeforeLoadIsKept(t *testing.T) {
	h := newHarness(t)
	h.deploy("")
	h.m.Close()
	o := h.m.o
	o.Registerer = prometheus.NewRegistry()
	m, err := New(h.withLocal(o))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(m.Close)
	m.Activate("hello") // the app is not loaded yet
	if err := m.Start(context.Background()); err != nil {
		t.Fatal(err)
	}
	h.m = m
	h.advanceUntil("the kept wake-up starts a replica", tick, func() bool { return len(h.replicas()[StateReady]) == 1 })
}

// A wake-up that comes before the app's deploy made its controller (a
// route the proxy had from an earlier run, say) is kept for it.
func TestWakeBeforeDeployIsKept(t *testing.T) {
	h := newHarness(t)
	h.m.Activate("hello")
	h.deploy("")
	h.advanceUntil("the kept wake-up starts a replica", tick, func() bool { return len(h.replicas()[StateReady]) == 1 })
}

// A kept wake-up lapses after keptWakeFor: nobody waits for it any more,
// and the app, deployed later, starts no replica for it.
func TestKeptWakeLapses(t *testing.T) {
	h := newHarness(t)
	h.m.Activate("hello")
	h.clock.Advance(keptWakeFor)
	h.deploy("")
	for range 5 {
		h.advance(tick)
	}
	if r := h.replicas(); len(r) != 0 {
		t.Fatalf("replicas after a lapsed wake-up: %v, want none", r)
	}
}

// A wake-up after a lapsed one is kept in its place: the lapsed one does
// not hide it, and the app, deployed then, starts a replica.
func TestWakeAfterALapsedOneIsKept(t *testing.T) {
	h := newHarness(t)
	h.m.Activate("hello")
	h.clock.Advance(keptWakeFor)
	h.m.Activate("hello")
	h.deploy("")
	h.advanceUntil("the second wake-up starts a replica", tick, func() bool { return len(h.replicas()[StateReady]) == 1 })
}

// The wake-ups kept are bounded in count: past maxKeptWakes, those that
// lapsed make room, and otherwise a new one is dropped.
func TestKeptWakesBounded(t *testing.T) {
	h := newHarness(t)
	for i := range maxKeptWakes + 10 {
		h.m.Activate(fmt.Sprintf("app-%d", i))
	}
	h.m.mu.Lock()
	n := len(h.m.wakes)
	h.m.mu.Unlock()
	if n != maxKeptWakes {
		t.Fatalf("%d wake-ups kept, want %d", n, maxKeptWakes)
	}
	h.clock.Advance(keptWakeFor)
	h.m.Activate("late")
	h.m.mu.Lock()
	_, kept := h.m.wakes["late"]
	n = len(h.m.wakes)
	h.m.mu.Unlock()
	if !kept || n != 1 {
		t.Fatalf("after the others lapsed: late kept %v, %d kept; want true, 1", kept, n)
	}
}

// lateWaker passes the proxy's wake-ups on to the Manager set later.
type lateWaker struct{ m atomic.Pointer[Manager] }

func (w *lateWaker) Activate(app string) {
	if m := w.m.Load(); m != nil {
		m.Activate(app)
	}
}

// staleLoad is the proxy process's load as a controller may read it while
// the daemon starts: a snapshot taken before the request came.
type staleLoad struct{ *proxy.Proxy }

func (s staleLoad) Load(app string) route.Load {
	return route.Load{Endpoints: s.Proxy.Load(app).Endpoints}
}

// A request the proxy holds for an app whose controller the restarted
// daemon has not loaded yet is served once the app loads, not answered
// 503 at its queue timeout.
func TestRequestQueuedBeforeLoadIsServed(t *testing.T) {
	h := newHarness(t)
	h.deploy("")
	rt := h.r.route("hello") // the proxy has the app's route from before
	h.m.Close()
	var w lateWaker
	prx := proxy.New(proxy.Options{Activator: &w, Clock: h.clock, Logger: slog.New(slog.DiscardHandler),
		Registerer: prometheus.NewRegistry()})
	prx.SetRoute(rt)
	o := h.m.o
	o.Registerer, o.Router = prometheus.NewRegistry(), staleLoad{prx}
	m, err := New(h.withLocal(o))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(m.Close)
	w.m.Store(m)
	code := make(chan int, 1)
	go func() {
		rec := httptest.NewRecorder()
		prx.ServeHTTP(rec, httptest.NewRequest("GET", "http://hello.localhost/", nil))
		code <- rec.Code
	}()
	h.wait("the request queued", func() bool { return prx.Load("hello").Queued == 1 })
	if err := m.Start(context.Background()); err != nil {
		t.Fatal(err)
	}
	h.m = m
	var got int
	h.advanceUntil("the queued request answered", tick, func() bool {
		select {
		case got = <-code:
			return true
		default:
			return false
		}
	})
	if got != http.StatusOK {
		t.Fatalf("the queued request was answered %d, want 200", got)
	}
}
