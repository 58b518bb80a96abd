package proxy

import (
	"bufio"
	"fmt"
	"io"
	"net/http"
	"testing"
	"time"

	"github.com/shoal-run/shoal/internal/route"
)

// A gRPC call to an h2c app whose replica is on another node streams both
// ways through the hop, message by message (the next message goes only
// once the last one's echo came back), and its trailers arrive, whatever
// the client spoke; the hop is HTTP/2 and its connections are reused.
func TestHopH2CStreamsBothWays(t *testing.T) {
	n1, n2 := newFront(t, Options{}), newFront(t, Options{})
	n1.p.SetHop("n1", testHopKey)
	n2.p.SetHop("n2", testHopKey)
	b := newH2CBackend(t, grpcEcho)
	n2.p.SetRoute(route.Route{App: "g", Endpoints: []route.Endpoint{{ID: "g-2", Addr: b.addr, Node: "n2", Protocol: route.ProtocolH2C}}})
	n1.p.SetRoute(route.Route{App: "g", Endpoints: []route.Endpoint{{ID: "g-2", Addr: n2.addr, Node: "n2", Protocol: route.ProtocolH2C}}})
	for _, c := range []struct {
		name   string
		client interface {
			Do(*http.Request) (*http.Response, error)
		}
	}{{"h2c client", h2cClient(t)}, {"HTTP/1.1 client", n1.client}} {
		pr, pw := io.Pipe()
		req := n1.req(t, "POST", "g.localhost", "/echo.Echo/Chat", pr)
		req.Header.Set("Content-Type", "application/grpc")
		req.Header.Set("Te", "trailers")
		done := make(chan struct{})
		go func() {
			defer close(done)
			resp, err := c.client.Do(req)
			if err != nil {
				t.Errorf("%s: %v", c.name, err)
				return
			}
			defer resp.Body.Close()
			br := bufio.NewReader(resp.Body)
			for i := range 3 {
				fmt.Fprintf(pw, "m%d\n", i)
				line, err := br.ReadString('\n')
				if want := fmt.Sprintf("echo m%d\n", i); err != nil || line != want {
					t.Errorf("%s: message %d: %q, %v; want %q", c.name, i, line, err, want)
					return
				}
			}
			pw.Close()
			if rest, err := io.ReadAll(br); err != nil || len(rest) != 0 {
				t.Errorf("%s: rest of the answer %q, %v", c.name, rest, err)
			}
			if s, m := resp.Trailer.Get("Grpc-Status"), resp.Trailer.Get("Grpc-Message"); resp.StatusCode != 200 || s != "0" || m != "done" {
				t.Errorf("%s: %d, trailers %v", c.name, resp.StatusCode, resp.Trailer)
			}
		}()
		select {
		case <-done:
		case <-time.After(time.Minute): // a hang guard
			pw.CloseWithError(io.ErrClosedPipe)
			t.Fatalf("%s: the call through the hop stalled", c.name)
		}
		if t.Failed() {
			return
		}
	}
	if n := b.hits.Load(); n != 2 {
		t.Fatalf("replica got %d calls, want 2", n)
	}
	ep := (*n1.p.apps.Load())["g"].eps["g-2"]
	if ep.h2 == nil {
		t.Fatal("the hop to an h2c app's replica is not HTTP/2")
	}
	ep.h2.mu.Lock()
	n := len(ep.h2.conns)
	ep.h2.mu.Unlock()
	if n != 1 {
		t.Fatalf("%d hop connections to n2, want 1", n)
	}
}
