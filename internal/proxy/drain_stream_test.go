package proxy

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/shoal-run/shoal/internal/route"
)

// block is what streamingBackend writes at a time: more than the fast
// path's client buffer, so that a body of known length, which it does not
// flush after every read, still reaches the client as it comes.
const block = 64 << 10

// streamingBackend answers with a body written a block at a time: one,
// then one more for each value sent on more, until the request ends. kind
// picks the answer's framing: "sse" (an event stream, chunked), "chunked"
// (no length) or "length" (a Content-Length far beyond what it writes).
func streamingBackend(t *testing.T, kind string, more <-chan struct{}) *backend {
	data := "data: " + strings.Repeat("x", block-8) + "\n\n"
	return newBackend(t, func(w http.ResponseWriter, r *http.Request) {
		switch kind {
		case "sse":
			w.Header().Set("Content-Type", "text/event-stream")
		case "length":
			w.Header().Set("Content-Length", strconv.Itoa(100*block))
		}
		for {
			io.WriteString(w, data)
			w.(http.Flusher).Flush()
			select {
			case <-more:
			case <-r.Context().Done():
				return
			}
		}
	})
}

// An answer still streaming from an endpoint that left its route keeps
// flowing during the drain and holds WaitIdle; when the drain's grace is
// over (WaitIdle's context ends), the answer is cut: the client's
// connection closes before the body's end, and the endpoint has nothing in
// flight. So for an event stream, a chunked body and a body of known
// length, on the proxy's own fast path and on the net/http path.
func TestDrainGraceCutsStreamedAnswers(t *testing.T) {
	for _, path := range []string{"fast", "net/http"} {
		for _, kind := range []string{"sse", "chunked", "length"} {
			t.Run(path+"/"+kind, func(t *testing.T) {
				more := make(chan struct{})
				b := streamingBackend(t, kind, more)
				f := newFront(t, Options{})
				url := f.url
				if path == "net/http" {
					srv := httptest.NewServer(f.p)
					t.Cleanup(srv.Close)
					url = srv.URL
				}
				f.p.SetRoute(routeTo("a", b))
				req, _ := http.NewRequest("GET", url+"/stream", nil)
				req.Host = "a.localhost"
				resp, err := f.client.Do(req)
				if err != nil {
					t.Fatal(err)
				}
				defer resp.Body.Close()
				var got atomic.Int64
				ended := make(chan error, 1)
				go func() {
					buf := make([]byte, 32<<10)
					for {
						n, err := resp.Body.Read(buf)
						got.Add(int64(n))
						if err != nil {
							ended <- err
							return
						}
					}
				}()
				// What the proxy may still hold in its buffers.
				const slack = 8 << 10
				eventually(t, "the first block", func() bool { return got.Load() >= block-slack })
				f.p.SetRoute(route.Route{App: "a"}) // the endpoint leaves the route and drains
				ctx, graceOver := context.WithCancel(context.Background())
				waited := make(chan error, 1)
				go func() { waited <- f.p.WaitIdle(ctx, "a-a") }()
				more <- struct{}{}
				eventually(t, "a block during the drain", func() bool { return got.Load() >= 2*block-slack })
				select {
				case err := <-waited:
					t.Fatalf("WaitIdle returned (%v) with an answer streaming", err)
				default:
				}
				graceOver()
				if err := recv(t, waited, "WaitIdle"); err == nil {
					t.Fatal("WaitIdle cut short returned no error")
				}
				if err := recv(t, ended, "the answer to end"); err != io.ErrUnexpectedEOF {
					t.Fatalf("the answer ended with %v after %d bytes, want it cut short", err, got.Load())
				}
				eventually(t, "nothing in flight", func() bool { return f.p.Load("a").InFlight == 0 })
			})
		}
	}
}

// Once an endpoint's drain is over, a request that was sent to it and has
// no answer yet fails rather than being sent to it again, and the endpoint
// dials no new connection until it is back in a route.
func TestDrainGraceCutsRequestAwaitingAnswer(t *testing.T) {
	b := newBackend(t, func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/slow" {
			<-r.Context().Done() // answers nothing while the client waits
			return
		}
		fmt.Fprint(w, "quick")
	})
	f := newFront(t, Options{})
	f.p.SetRoute(routeTo("a", b))
	got := f.goDo(f.req(t, "GET", "a.localhost", "/slow", nil))
	eventually(t, "the request at the replica", func() bool { return b.hits.Load() == 1 })
	f.p.SetRoute(route.Route{App: "a"})
	ctx, graceOver := context.WithCancel(context.Background())
	graceOver()
	if err := f.p.WaitIdle(ctx, "a-a"); err == nil {
		t.Fatal("WaitIdle with its grace over returned no error")
	}
	r := recv(t, got, "the answer")
	if r.err == nil && r.code != http.StatusBadGateway {
		t.Fatalf("the request on the cut endpoint was answered %d %q, want 502", r.code, r.body)
	}
	if n := b.hits.Load(); n != 1 {
		t.Fatalf("the replica saw %d requests, want the one (not sent again)", n)
	}
	eventually(t, "nothing in flight", func() bool { return f.p.Load("a").InFlight == 0 })
	f.p.SetRoute(routeTo("a", b)) // back in the route: it serves again
	if code, body, _ := f.get(t, "a.localhost", "/"); code != 200 || body != "quick" {
		t.Fatalf("the endpoint back in its route answered %d %q", code, body)
	}
}
