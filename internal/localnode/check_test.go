package localnode

import (
	"context"
	"errors"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/shoal-run/shoal/internal/manifest"
	"github.com/shoal-run/shoal/internal/runtime"
)

// Stand-ins for the parts a check does not use.
type (
	noRuntime struct{ Runtime }
	noImages  struct{ Images }
	noNetwork struct{ Network }
	noRouter  struct{ Router }
)

// An HTTP health check says what it is in its User-Agent, with the
// daemon's version: an operator can leave the checks out of access logs.
func TestHTTPCheckUserAgent(t *testing.T) {
	agents := make(chan string, 1)
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/healthz" {
			select {
			case agents <- r.UserAgent():
			default:
			}
		}
	}))
	t.Cleanup(srv.Close)
	for _, c := range []struct{ version, want string }{{"1.2.3", "shoal-health/1.2.3"}, {"", "shoal-health/dev"}} {
		n, err := New(Options{Runtime: noRuntime{}, Images: noImages{}, Network: noNetwork{}, Router: noRouter{}, Version: c.version})
		if err != nil {
			t.Fatal(err)
		}
		addr := strings.TrimPrefix(srv.URL, "http://")
		h := manifest.Health{HTTP: "/healthz", Timeout: manifest.Duration{Duration: 30 * time.Second}}
		if err := n.Check(context.Background(), "r1", addr, h); err != nil {
			t.Fatalf("check: %v", err)
		}
		if got := <-agents; got != c.want {
			t.Errorf("version %q: User-Agent %q, want %q", c.version, got, c.want)
		}
	}
}

// freezeOnly is a runtime that freezes and has no stats.
type freezeOnly struct{ Runtime }

func (freezeOnly) Freeze(string) error { return nil }
func (freezeOnly) Stats(string) (runtime.Stats, error) {
	return runtime.Stats{}, errors.New("no stats")
}

// HTTP checks of a replica reuse one kept-alive connection; a freeze drops
// it, so a frozen replica holds no socket of the daemon's.
func TestHTTPCheckKeepsItsConnection(t *testing.T) {
	var mu sync.Mutex
	states := map[http.ConnState]int{}
	srv := httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		io.WriteString(w, "ok")
	}))
	srv.Config.ConnState = func(_ net.Conn, s http.ConnState) {
		mu.Lock()
		states[s]++
		mu.Unlock()
	}
	srv.Start()
	t.Cleanup(srv.Close)
	count := func(s http.ConnState) int {
		mu.Lock()
		defer mu.Unlock()
		return states[s]
	}
	n, err := New(Options{Runtime: freezeOnly{}, Images: noImages{}, Network: noNetwork{}, Router: noRouter{}})
	if err != nil {
		t.Fatal(err)
	}
	addr := strings.TrimPrefix(srv.URL, "http://")
	h := manifest.Health{HTTP: "/healthz", Timeout: manifest.Duration{Duration: 30 * time.Second}}
	for range 3 {
		if err := n.Check(context.Background(), "r1", addr, h); err != nil {
			t.Fatalf("check: %v", err)
		}
	}
	if got := count(http.StateNew); got != 1 {
		t.Fatalf("3 checks opened %d connections, want 1", got)
	}
	if _, err := n.Freeze(context.Background(), "r1"); err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(30 * time.Second)
	for count(http.StateClosed) != 1 {
		if time.Now().After(deadline) {
			t.Fatal("the check's connection is still open after a freeze")
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// A freeze drops the frozen replica's check connection only: another
// replica's next check reuses its own.
func TestFreezeKeepsOtherReplicasCheckConnection(t *testing.T) {
	type server struct {
		mu     sync.Mutex
		states map[http.ConnState]int
		addr   string
	}
	start := func() *server {
		s := &server{states: map[http.ConnState]int{}}
		srv := httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			io.WriteString(w, "ok")
		}))
		srv.Config.ConnState = func(_ net.Conn, st http.ConnState) {
			s.mu.Lock()
			s.states[st]++
			s.mu.Unlock()
		}
		srv.Start()
		t.Cleanup(srv.Close)
		s.addr = strings.TrimPrefix(srv.URL, "http://")
		return s
	}
	count := func(s *server, st http.ConnState) int {
		s.mu.Lock()
		defer s.mu.Unlock()
		return s.states[st]
	}
	a, b := start(), start()
	n, err := New(Options{Runtime: freezeOnly{}, Images: noImages{}, Network: noNetwork{}, Router: noRouter{}})
	if err != nil {
		t.Fatal(err)
	}
	h := manifest.Health{HTTP: "/healthz", Timeout: manifest.Duration{Duration: 30 * time.Second}}
	check := func(id string, s *server) {
		t.Helper()
		if err := n.Check(context.Background(), id, s.addr, h); err != nil {
			t.Fatalf("check of %s: %v", id, err)
		}
	}
	check("a", a)
	check("b", b)
	if _, err := n.Freeze(context.Background(), "a"); err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(30 * time.Second)
	for count(a, http.StateClosed) != 1 {
		if time.Now().After(deadline) {
			t.Fatal("the frozen replica's check connection is still open")
		}
		time.Sleep(10 * time.Millisecond)
	}
	check("b", b)
	if got := count(b, http.StateNew); got != 1 {
		t.Errorf("replica b's checks opened %d connections after a's freeze, want 1 (its kept-alive one)", got)
	}
	if got := count(b, http.StateClosed); got != 0 {
		t.Errorf("replica b's check connection was closed %d times by a's freeze", got)
	}
}
