package proxy

import (
	"bufio"
	"io"
	"net"
	"net/http"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/shoal-run/shoal/internal/route"
)

// dyingBackend is a replica that dies under every request: it reads the
// request head and closes the connection without answering, with a reset
// when reset is set.
type dyingBackend struct {
	addr  string
	conns atomic.Int64 // requests it read
}

func newDyingBackend(t *testing.T, reset bool) *dyingBackend {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { l.Close() })
	d := &dyingBackend{addr: l.Addr().String()}
	go func() {
		for {
			c, err := l.Accept()
			if err != nil {
				return
			}
			go func() {
				defer c.Close()
				br := bufio.NewReader(c)
				for {
					line, err := br.ReadString('\n')
					if err != nil {
						return
					}
					if line == "\r\n" {
						break
					}
				}
				d.conns.Add(1)
				if reset {
					c.(*net.TCPConn).SetLinger(0)
				}
			}()
		}
	}()
	return d
}

func TestRetryWhenReplicaDiesBeforeAnswering(t *testing.T) {
	for _, reset := range []bool{false, true} {
		name := map[bool]string{false: "close", true: "reset"}[reset]
		t.Run(name, func(t *testing.T) {
			reg := prometheus.NewRegistry()
			f := newFront(t, Options{Registerer: reg})
			dying, live := newDyingBackend(t, reset), echo(t)
			// All weight on the dying replica's revision, so that every
			// request goes to it first; its retry may go to any other.
			f.p.SetRoute(route.Route{App: "a", Weights: map[int]int{1: 100}, Endpoints: []route.Endpoint{
				{ID: "a-dying", Addr: dying.addr, Revision: 1},
				{ID: "a-live", Addr: live.addr, Revision: 2},
			}})
			retries := f.p.metrics.retries.WithLabelValues("a")
			sent, retried := 0, 0
			for base, url := range fronts(t, f) {
				for _, method := range []string{"GET", "HEAD", "OPTIONS", "PUT", "DELETE", "GET"} {
					code, body, _ := send(t, f, url, method, "", nil)
					sent++
					retried++
					want := method + " / "
					if method == "HEAD" {
						want = ""
					}
					if code != 200 || body != want {
						t.Fatalf("%s %s: %d %q, want 200 %q from the live replica", base, method, code, body, want)
					}
				}
				for _, method := range []string{"POST", "PUT", "PATCH"} {
					code, body, _ := send(t, f, url, method, "", strings.NewReader("payload"))
					sent++
					if code != 502 {
						t.Fatalf("%s %s with a body: %d %q, want 502", base, method, code, body)
					}
					apiError(t, body)
				}
				code, body, _ := send(t, f, url, "POST", "", nil)
				sent++
				if code != 502 {
					t.Fatalf("%s POST: %d %q, want 502", base, code, body)
				}
			}
			if n := dying.conns.Load(); n != int64(sent) {
				t.Errorf("the dying replica read %d requests, want %d (one each, never twice)", n, sent)
			}
			if n := counterValue(retries); n != float64(retried) {
				t.Errorf("shoal_proxy_retries_total{app=\"a\"} = %v, want %d", n, retried)
			}
			for id, e := range f.p.Load("a").Endpoints {
				if e.InFlight != 0 {
					t.Errorf("endpoint %s has %d in flight", id, e.InFlight)
				}
			}
		})
	}
}

func TestRetryGivesUpAfterTwoOtherReplicas(t *testing.T) {
	f := newFront(t, Options{})
	ds := []*dyingBackend{newDyingBackend(t, false), newDyingBackend(t, true), newDyingBackend(t, false), newDyingBackend(t, true)}
	var eps []route.Endpoint
	for i, d := range ds {
		eps = append(eps, route.Endpoint{ID: "a-" + string(rune('0'+i)), Addr: d.addr, Revision: 1})
	}
	f.p.SetRoute(route.Route{App: "a", Endpoints: eps})
	for name, url := range fronts(t, f) {
		for _, d := range ds {
			d.conns.Store(0)
		}
		code, body, _ := send(t, f, url, "GET", "", nil)
		if code != 502 {
			t.Fatalf("%s: every replica dies: %d %q, want 502", name, code, body)
		}
		apiError(t, body)
		total := int64(0)
		for i, d := range ds {
			if n := d.conns.Load(); n > 1 {
				t.Errorf("%s: replica %d got the request %d times", name, i, n)
			}
			total += d.conns.Load()
		}
		if total != 1+maxDeathRetries {
			t.Errorf("%s: the request was sent %d times, want %d", name, total, 1+maxDeathRetries)
		}
	}
}

func TestStickyReplicaDiesBeforeAnswering(t *testing.T) {
	f := newFront(t, Options{})
	dying, live := newDyingBackend(t, true), namedBackend(t, "a-live")
	f.p.SetRoute(route.Route{App: "a", Sticky: true, Endpoints: []route.Endpoint{
		{ID: "a-dying", Addr: dying.addr, Revision: 1},
		{ID: "a-dead", Addr: deadAddr(t), Revision: 1},
		{ID: "a-live", Addr: live.addr, Revision: 1},
	}})
	for name, url := range fronts(t, f) {
		for _, id := range []string{"a-dying", "a-dead"} {
			code, body, sc := send(t, f, url, "GET", route.StickyCookie+"="+id, nil)
			if code != 200 || body != "a-live" || stuckTo(t, sc) != "a-live" {
				t.Fatalf("%s: cookie for %s: %d from %q, Set-Cookie %q; want the live replica and a cookie naming it", name, id, code, body, sc)
			}
		}
	}
}

// The retry contract does not depend on the kind of request: an upgrade
// (a GET without a body) whose replica dies before answering is sent to
// another replica as any GET is, and a chunked upload, which has a body,
// is never sent twice.
func TestRetryContractForUpgradesAndChunkedUploads(t *testing.T) {
	f := newFront(t, Options{})
	dying := newDyingBackend(t, false)
	live := newBackend(t, func(w http.ResponseWriter, r *http.Request) {
		if r.Header.Get("Upgrade") != "echo" {
			io.Copy(io.Discard, r.Body)
			io.WriteString(w, "live")
			return
		}
		conn, brw, err := http.NewResponseController(w).Hijack()
		if err != nil {
			return
		}
		defer conn.Close()
		brw.WriteString("HTTP/1.1 101 Switching Protocols\r\nConnection: Upgrade\r\nUpgrade: echo\r\n\r\n")
		brw.Flush()
		io.Copy(conn, brw)
	})
	f.p.SetRoute(route.Route{App: "a", Weights: map[int]int{1: 100}, Endpoints: []route.Endpoint{
		{ID: "a-dying", Addr: dying.addr, Revision: 1},
		{ID: "a-live", Addr: live.addr, Revision: 2},
	}})
	rc := f.dial(t)
	rc.send("GET /ws HTTP/1.1\r\nHost: a.localhost\r\nConnection: Upgrade\r\nUpgrade: echo\r\n\r\n")
	resp, err := http.ReadResponse(rc.br, nil)
	if err != nil || resp.StatusCode != http.StatusSwitchingProtocols {
		t.Fatalf("an upgrade whose first replica died: %v %v, want 101 from the other", resp, err)
	}
	rc.send("hello\n")
	if l, err := rc.br.ReadString('\n'); err != nil || l != "hello\n" {
		t.Fatalf("echo over the upgrade: %q %v", l, err)
	}
	if n := dying.conns.Load(); n != 1 {
		t.Fatalf("the dying replica read %d requests, want 1", n)
	}
	rc = f.dial(t)
	rc.send("POST / HTTP/1.1\r\nHost: a.localhost\r\nTransfer-Encoding: chunked\r\n\r\n7\r\npayload\r\n0\r\n\r\n")
	if resp, body := rc.read("POST"); resp.StatusCode != http.StatusBadGateway {
		t.Fatalf("a chunked upload whose replica died: %d %q, want 502", resp.StatusCode, body)
	}
	if n := dying.conns.Load(); n != 2 || live.hits.Load() != 1 {
		t.Fatalf("the chunked upload reached the dying replica %d times and the live one %d (want once, never)", n-1, live.hits.Load()-1)
	}
}
