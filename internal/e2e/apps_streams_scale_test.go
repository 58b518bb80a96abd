package e2e

import (
	"bufio"
	"fmt"
	"io"
	"net/http"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"golang.org/x/net/websocket"

	"github.com/shoal-run/shoal/internal/api/types"
)

// scaleManifest is hello between min and max replicas, with idle and
// drain timeouts.
func scaleManifest(min, max int, idle, drain string) string {
	return fmt.Sprintf(`
name = "hello"
image = "hello:1"
port = 8080
[scale]
min = %d
max = %d
idle_timeout = %q
drain_timeout = %q
freeze_timeout = "10m"
[health]
http = "/healthz"
interval = "200ms"
`, min, max, idle, drain)
}

// sse is an open event stream of hello's /sse through the proxy, read as
// its events come.
type sse struct {
	replica string       // the replica that serves it
	last    atomic.Int64 // the number of the last event read
	ended   chan error   // the read's end: nil for a clean end
	body    io.Closer
}

func openSSE(t *testing.T, proxy string) *sse {
	t.Helper()
	req, _ := http.NewRequest(http.MethodGet, "http://"+proxy+"/sse", nil)
	req.Host = "hello.localhost"
	resp, err := client.Do(req)
	if err != nil {
		t.Fatalf("SSE through the proxy: %v", err)
	}
	if resp.StatusCode != 200 || resp.Header.Get("X-Replica") == "" {
		resp.Body.Close()
		t.Fatalf("SSE answer: %s from %q", resp.Status, resp.Header.Get("X-Replica"))
	}
	s := &sse{replica: resp.Header.Get("X-Replica"), ended: make(chan error, 1), body: resp.Body}
	t.Cleanup(func() { s.body.Close() })
	go func() {
		events := bufio.NewScanner(resp.Body)
		for events.Scan() {
			data, ok := strings.CutPrefix(events.Text(), "data: ")
			if !ok {
				continue
			}
			f := strings.Fields(data)
			if len(f) != 3 || f[2] != s.replica {
				s.ended <- fmt.Errorf("event %q, want one from %s", data, s.replica)
				return
			}
			n, _ := strconv.Atoi(f[0])
			s.last.Store(int64(n))
		}
		s.ended <- events.Err()
	}()
	return s
}

// flows checks that events sent from now on arrive: three more than the
// last one read, on a stream that was not cut.
func (s *sse) flows(t *testing.T, when string) {
	t.Helper()
	n := s.last.Load()
	waitFor(t, "SSE events "+when, func() bool {
		select {
		case err := <-s.ended:
			t.Fatalf("the SSE stream ended %s: %v (last event %d)", when, err, s.last.Load())
		default:
		}
		return s.last.Load() >= n+3
	})
}

// streams are a WebSocket and an SSE stream open on one replica of hello.
type streams struct {
	ws      *websocket.Conn
	replica string
	sse     *sse
	n       int
}

// openStreams opens both streams while hello has one ready replica, which
// then serves both.
func openStreams(t *testing.T, proxy string) *streams {
	t.Helper()
	s := &streams{ws: dialWS(t, proxy, "hello", "/ws")}
	t.Cleanup(func() { s.ws.Close() })
	got := echo(t, s.ws, "0")
	s.replica = strings.TrimPrefix(got, "0 from ")
	s.sse = openSSE(t, proxy)
	if s.sse.replica != s.replica {
		t.Fatalf("the SSE stream is on %s, the WebSocket on %s; want one replica", s.sse.replica, s.replica)
	}
	s.flow(t, "once open")
	return s
}

// flow checks that both streams carry what is sent on them from now on,
// from their replica.
func (s *streams) flow(t *testing.T, when string) {
	t.Helper()
	s.n++
	msg := strconv.Itoa(s.n)
	if got, want := echo(t, s.ws, msg), msg+" from "+s.replica; got != want {
		t.Fatalf("WebSocket %s answered %q, want %q", when, got, want)
	}
	s.sse.flows(t, when)
}

// holding reports whether the streams' replica is ready with both of them
// in flight.
func (s *streams) holding(a types.App) bool {
	for _, r := range a.Replicas {
		if r.ID == s.replica {
			return r.State == "ready" && r.InFlight == 2
		}
	}
	return false
}

// others counts the replicas other than the streams' in state.
func (s *streams) others(a types.App, state string) int {
	n := 0
	for _, r := range a.Replicas {
		if r.ID != s.replica && r.State == state {
			n++
		}
	}
	return n
}

// keeps watches the app for three seconds: the streams' replica stays
// ready with both streams in flight, and cond holds all along.
func (s *streams) keeps(d *daemon, what string, cond func(types.App) bool) {
	d.t.Helper()
	for end := time.Now().Add(3 * time.Second); time.Now().Before(end); time.Sleep(100 * time.Millisecond) {
		if a := d.app("hello"); !s.holding(a) || !cond(a) {
			d.t.Fatalf("%s: %+v", what, a.Replicas)
		}
	}
}

// A WebSocket and an SSE stream open on an app's one replica go on when
// the app scales out (two more replicas start and take new requests) and
// when it scales in again (its bounds drop to one): the two idle replicas
// freeze for the scale-in while the streams' replica, with both in flight,
// is kept ready; what is sent on both streams after each event arrives.
func TestStreamsOutliveScaleOutAndIn(t *testing.T) {
	d := startDaemon(t)
	d.exampleImage("hello")
	d.deploy(scaleManifest(1, 1, "10m", "60s"))
	d.waitApp("hello", "one ready replica", func(a types.App) bool { return a.Ready == 1 })
	proxy := d.proxyAddr()
	s := openStreams(t, proxy)

	d.must("app", "scale", "hello", "--min", "3", "--max", "3")
	d.waitApp("hello", "the scale-out to three ready replicas", func(a types.App) bool {
		return replicasIn(a, "ready") == 3 && s.holding(a)
	})
	s.flow(t, "after the scale-out")
	seen := map[string]bool{}
	for range 30 {
		if code, _, rep := get(t, proxy, "hello", "/"); code == 200 {
			seen[rep] = true
		}
	}
	if len(seen) < 2 {
		t.Fatalf("new requests after the scale-out went to %v only, want the new replicas too", seen)
	}

	d.must("app", "scale", "hello", "--min", "1", "--max", "1")
	d.waitApp("hello", "the scale-in: the two idle replicas frozen", func(a types.App) bool {
		return s.others(a, "frozen") == 2 && s.holding(a)
	})
	s.flow(t, "after the scale-in")
	s.keeps(d, "after the scale-in the streams' replica must stay ready with them in flight",
		func(a types.App) bool { return s.others(a, "frozen") == 2 })
	s.flow(t, "after the scale-in, later")
	froze := 0
	for _, e := range d.events("hello", "freeze") {
		if e.Replica == s.replica {
			t.Fatalf("the streams' replica was frozen: %+v", e)
		}
		if e.Reason == "scale in" {
			froze++
		}
	}
	if froze != 2 {
		t.Fatalf("%d freezes for the scale-in, want 2", froze)
	}
}

// A WebSocket and an SSE stream open on one replica go on while the app's
// other replicas, idle, freeze: the app scales out to three, its minimum
// drops to zero, and the two replicas without a request freeze after
// idle_timeout while the streams' replica stays ready; once the client
// closes both streams, that replica freezes too.
func TestStreamsOutliveIdleFreezeOfOtherReplicas(t *testing.T) {
	d := startDaemon(t)
	d.exampleImage("hello")
	d.deploy(scaleManifest(1, 4, "1s", "60s"))
	d.waitApp("hello", "one ready replica", func(a types.App) bool { return a.Ready == 1 })
	proxy := d.proxyAddr()
	s := openStreams(t, proxy)

	d.must("app", "scale", "hello", "--min", "3")
	d.waitApp("hello", "the scale-out to three ready replicas", func(a types.App) bool {
		return replicasIn(a, "ready") == 3 && s.holding(a)
	})
	s.flow(t, "after the scale-out")

	d.must("app", "scale", "hello", "--min", "0")
	d.waitApp("hello", "the two idle replicas to freeze", func(a types.App) bool {
		return s.others(a, "frozen") == 2 && s.holding(a)
	})
	s.flow(t, "after the other replicas froze")
	s.keeps(d, "past idle_timeout the streams' replica must stay ready with them in flight",
		func(a types.App) bool { return s.others(a, "frozen") == 2 })
	s.flow(t, "past idle_timeout")
	for _, e := range d.events("hello", "freeze") {
		if e.Replica == s.replica {
			t.Fatalf("the streams' replica was frozen with the streams open: %+v", e)
		}
		if !strings.HasPrefix(e.Reason, "idle for") {
			t.Fatalf("a freeze for %q, want idle_timeout", e.Reason)
		}
	}

	s.ws.Close()
	s.sse.body.Close()
	d.waitApp("hello", "the streams' replica to freeze once they closed", func(a types.App) bool {
		return replicasIn(a, "frozen") == 3
	})
}
