package proxy

import (
	"bufio"
	"context"
	"crypto/tls"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/shoal-run/shoal/internal/clock"
	"github.com/shoal-run/shoal/internal/route"
)

// newH2CBackend is a replica that speaks cleartext HTTP/2 only (as a gRPC
// server does): an HTTP/1.1 request gets no answer from it.
func newH2CBackend(t *testing.T, h http.HandlerFunc) *backend {
	t.Helper()
	b := &backend{}
	b.srv = httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		b.hits.Add(1)
		if r.ProtoMajor != 2 {
			t.Errorf("replica got %s, want HTTP/2", r.Proto)
		}
		h(w, r)
	}))
	var p http.Protocols
	p.SetUnencryptedHTTP2(true)
	b.srv.Config.Protocols = &p
	b.srv.Start()
	t.Cleanup(b.srv.Close)
	b.addr = strings.TrimPrefix(b.srv.URL, "http://")
	return b
}

// h2cRouteTo is routeTo for h2c replicas.
func h2cRouteTo(app string, bs ...*backend) route.Route {
	r := routeTo(app, bs...)
	for i := range r.Endpoints {
		r.Endpoints[i].Protocol = route.ProtocolH2C
	}
	return r
}

// h2cClient speaks HTTP/2 with prior knowledge to the proxy's plain
// listener, every request on one connection.
func h2cClient(t *testing.T) *http.Client {
	var p http.Protocols
	p.SetUnencryptedHTTP2(true)
	tr := &http.Transport{Protocols: &p, DisableCompression: true}
	t.Cleanup(tr.CloseIdleConnections)
	return &http.Client{Transport: tr}
}

// grpcEcho answers like a gRPC server: each message of the request body
// echoed as it comes, flushed, then the status in trailers.
func grpcEcho(w http.ResponseWriter, r *http.Request) {
	w.Header().Set("Content-Type", "application/grpc")
	w.Header().Set("Trailer", "Grpc-Status")
	w.WriteHeader(200)
	w.(http.Flusher).Flush()
	br := bufio.NewReader(r.Body)
	for {
		line, err := br.ReadString('\n')
		if line != "" {
			io.WriteString(w, "echo "+line)
			w.(http.Flusher).Flush()
		}
		if err != nil {
			break
		}
	}
	w.Header().Set("Grpc-Status", "0")
	w.Header().Set(http.TrailerPrefix+"Grpc-Message", "done")
}

// A call to an h2c app streams both ways through the proxy, each message
// passed on as it comes, and its trailers arrive, whether the client spoke
// HTTP/2 or HTTP/1.1.
func TestH2CReplicaStreamsBothWaysWithTrailers(t *testing.T) {
	f := newFront(t, Options{})
	b := newH2CBackend(t, grpcEcho)
	f.p.SetRoute(h2cRouteTo("g", b))
	for _, c := range []struct {
		name   string
		client *http.Client
	}{{"h2c client", h2cClient(t)}, {"HTTP/1.1 client", f.client}} {
		pr, pw := io.Pipe()
		req := f.req(t, "POST", "g.localhost", "/echo.Echo/Chat", pr)
		req.Header.Set("Content-Type", "application/grpc")
		req.Header.Set("Te", "trailers")
		resp, err := c.client.Do(req)
		if err != nil {
			t.Fatalf("%s: %v", c.name, err)
		}
		br := bufio.NewReader(resp.Body)
		for i := range 3 {
			// The next message goes only once the last one's echo came
			// back: nothing waits for the body's end on either side.
			fmt.Fprintf(pw, "m%d\n", i)
			line, err := br.ReadString('\n')
			if want := fmt.Sprintf("echo m%d\n", i); err != nil || line != want {
				t.Fatalf("%s: message %d: %q, %v; want %q", c.name, i, line, err, want)
			}
		}
		pw.Close()
		if rest, err := io.ReadAll(br); err != nil || len(rest) != 0 {
			t.Fatalf("%s: rest of the answer %q, %v", c.name, rest, err)
		}
		resp.Body.Close()
		if resp.StatusCode != 200 || resp.Header.Get("Content-Type") != "application/grpc" {
			t.Fatalf("%s: %d %v", c.name, resp.StatusCode, resp.Header)
		}
		if s, m := resp.Trailer.Get("Grpc-Status"), resp.Trailer.Get("Grpc-Message"); s != "0" || m != "done" {
			t.Fatalf("%s: trailers %v", c.name, resp.Trailer)
		}
	}
	if n := b.hits.Load(); n != 2 {
		t.Fatalf("replica got %d calls, want 2", n)
	}
	// Both calls went on one connection to the replica.
	ep := (*f.p.apps.Load())["g"].eps["g-a"]
	ep.h2.mu.Lock()
	n := len(ep.h2.conns)
	ep.h2.mu.Unlock()
	if n != 1 {
		t.Fatalf("%d connections to the replica, want 1", n)
	}
}

// A call to an h2c app with no replica wakes it and waits, as on HTTP/1.1,
// and its first byte is counted in the cold tier.
func TestH2CActivationFromZero(t *testing.T) {
	act := newActivator()
	f := newFront(t, Options{Activator: act, Clock: clock.NewFake(time.Unix(1000, 0))})
	f.p.SetRoute(coldRoute("g"))
	c := h2cClient(t)
	done := make(chan result, 1)
	go func() {
		resp, err := c.Do(f.req(t, "GET", "g.localhost", "/", nil))
		if err != nil {
			done <- result{err: err}
			return
		}
		defer resp.Body.Close()
		body, err := io.ReadAll(resp.Body)
		done <- result{code: resp.StatusCode, body: string(body), err: err}
	}()
	if app := recv(t, act.calls, "Activate"); app != "g" {
		t.Fatalf("Activate(%q)", app)
	}
	eventually(t, "the call to queue", func() bool { return f.p.Load("g").Queued == 1 })
	f.p.SetRoute(h2cRouteTo("g", newH2CBackend(t, func(w http.ResponseWriter, r *http.Request) {
		io.WriteString(w, "woke "+r.Proto)
	})))
	r := recv(t, done, "the released call")
	if r.err != nil || r.code != 200 || r.body != "woke HTTP/2.0" {
		t.Fatalf("released call: %+v", r)
	}
	if n, _ := histogram(t, f.p.metrics.firstByte.WithLabelValues("g", "cold")); n != 1 {
		t.Fatalf("first_byte_seconds{tier=cold}: %d observations, want 1", n)
	}
	if n := counterValue(f.p.metrics.cold.WithLabelValues("g")); n != 1 {
		t.Fatalf("cold starts = %v, want 1", n)
	}
}

// The retry contract holds for h2c replicas: a failed connect sends any
// request elsewhere; a replica that resets a stream before answering has
// a bodiless GET sent to another, never a call with a body (a gRPC call).
func TestH2CRetryContract(t *testing.T) {
	f := newFront(t, Options{})
	var resets atomic.Int64
	dying := newH2CBackend(t, func(w http.ResponseWriter, r *http.Request) {
		io.Copy(io.Discard, r.Body)
		resets.Add(1)
		panic(http.ErrAbortHandler) // RST_STREAM before any answer
	})
	good := newH2CBackend(t, func(w http.ResponseWriter, r *http.Request) {
		io.Copy(io.Discard, r.Body)
		io.WriteString(w, "good")
	})
	c := h2cClient(t)
	dead := route.Endpoint{ID: "g-dead", Addr: deadAddr(t), Protocol: route.ProtocolH2C}

	// A failed connect: every request goes on, body or not.
	rt := h2cRouteTo("g", good)
	rt.Endpoints = append([]route.Endpoint{dead}, rt.Endpoints...)
	f.p.SetRoute(rt)
	for range 4 {
		for _, m := range []string{"GET", "POST"} {
			resp, err := c.Do(f.req(t, m, "g.localhost", "/", strings.NewReader("x")))
			if err != nil {
				t.Fatal(err)
			}
			body, _ := io.ReadAll(resp.Body)
			resp.Body.Close()
			if resp.StatusCode != 200 || string(body) != "good" {
				t.Fatalf("%s past a dead replica: %d %q", m, resp.StatusCode, body)
			}
		}
	}

	// A stream reset before the answer: only the bodiless GET moves on.
	f.p.SetRoute(h2cRouteTo("g", dying))
	f.p.SetRoute(route.Route{App: "g", Endpoints: []route.Endpoint{
		{ID: "g-a", Addr: dying.addr, Protocol: route.ProtocolH2C},
		{ID: "g-b", Addr: good.addr, Protocol: route.ProtocolH2C}}})
	before := counterValue(f.p.metrics.retries.WithLabelValues("g"))
	// Tied replicas are picked at random: GET until one went to the dying
	// replica (eight in a row missed it once in a few hundred runs).
	for i := 0; i < 8 || (resets.Load() == 0 && i < 200); i++ {
		resp, err := c.Do(f.req(t, "GET", "g.localhost", "/", nil))
		if err != nil {
			t.Fatal(err)
		}
		body, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if resp.StatusCode != 200 || string(body) != "good" {
			t.Fatalf("GET: %d %q", resp.StatusCode, body)
		}
	}
	if resets.Load() == 0 {
		t.Fatal("no GET went to the dying replica; the test proves nothing")
	}
	if got := counterValue(f.p.metrics.retries.WithLabelValues("g")) - before; got != float64(resets.Load()) {
		t.Fatalf("%v retries counted, want one per reset (%d)", got, resets.Load())
	}
	// A call with a body is never sent twice.
	f.p.SetRoute(h2cRouteTo("g", dying))
	n := resets.Load()
	req := f.req(t, "POST", "g.localhost", "/echo.Echo/Say", strings.NewReader("call"))
	req.Header.Set("Content-Type", "application/grpc")
	resp, err := c.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	// The proxy's 502, as a gRPC answer (UNAVAILABLE, trailers only).
	if resp.StatusCode != 200 || resp.Header.Get("Grpc-Status") != grpcUnavailable || resets.Load() != n+1 {
		t.Fatalf("POST to a replica that reset it: %d grpc-status %q, sent %d times; want grpc-status 14, once",
			resp.StatusCode, resp.Header.Get("Grpc-Status"), resets.Load()-n)
	}
}

// A stream open on a replica that leaves the route goes on until the
// drain's grace is over; the cut then ends a gRPC call with UNAVAILABLE
// (grpc-status 14) in its trailers, as a WebSocket gets its close frame.
func TestH2CDrainCutEndsGRPCStreamUnavailable(t *testing.T) {
	f := newFront(t, Options{})
	release := make(chan struct{})
	b := newH2CBackend(t, func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/grpc")
		w.WriteHeader(200)
		io.WriteString(w, "first\n")
		w.(http.Flusher).Flush()
		select {
		case <-release:
		case <-r.Context().Done():
		}
	})
	defer close(release)
	f.p.SetRoute(h2cRouteTo("g", b))
	c := h2cClient(t)
	resp, err := c.Do(f.req(t, "POST", "g.localhost", "/echo.Echo/Count", strings.NewReader("n")))
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	br := bufio.NewReader(resp.Body)
	if line, err := br.ReadString('\n'); err != nil || line != "first\n" {
		t.Fatalf("first message: %q, %v", line, err)
	}
	f.p.SetRoute(route.Route{App: "g"}) // scale-in: the replica leaves
	ctx, cancel := context.WithTimeout(context.Background(), 50*time.Millisecond)
	defer cancel()
	if err := f.p.WaitIdle(ctx, "g-a"); err == nil {
		t.Fatal("WaitIdle returned while a stream was open")
	}
	rest, err := io.ReadAll(br)
	if err != nil || len(rest) != 0 {
		t.Fatalf("after the cut: %q, %v", rest, err)
	}
	if s := resp.Trailer.Get("Grpc-Status"); s != "14" {
		t.Fatalf("grpc-status %q after the cut, want 14; trailers %v", s, resp.Trailer)
	}
	if err := f.p.Idle(context.Background(), "g-a"); err != nil {
		t.Fatal(err)
	}
}

// Sticky routes and weighted splits hold for HTTP/2 clients: the answer
// sets the cookie, and a request that carries it reaches the same replica.
func TestH2StickyAndSplit(t *testing.T) {
	f := newFront(t, Options{})
	b1, b2 := namedBackend(t, "one"), namedBackend(t, "two")
	rt := route.Route{App: "s", Sticky: true, Weights: map[int]int{1: 0, 2: 100}, Endpoints: []route.Endpoint{
		{ID: "s-1", Addr: b1.addr, Revision: 1}, {ID: "s-2", Addr: b2.addr, Revision: 2}}}
	f.p.SetRoute(rt)
	c := h2cClient(t)
	var cookie string
	for range 10 {
		resp, err := c.Do(f.req(t, "GET", "s.localhost", "/", nil))
		if err != nil {
			t.Fatal(err)
		}
		body, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if resp.ProtoMajor != 2 || string(body) != "two" {
			t.Fatalf("split 0/100: %s %q", resp.Proto, body)
		}
		cookie = resp.Header.Get("Set-Cookie")
	}
	if !strings.HasPrefix(cookie, route.StickyCookie+"=s-2") {
		t.Fatalf("Set-Cookie %q", cookie)
	}
	// The cookie wins over the weights.
	req := f.req(t, "GET", "s.localhost", "/", nil)
	req.Header.Set("Cookie", route.StickyCookie+"=s-1")
	resp, err := c.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if string(body) != "one" {
		t.Fatalf("sticky to s-1 over h2: %q", body)
	}
}

// A TLS client that offers ALPN h2 speaks HTTP/2 to the proxy, which says
// to the replica that the request came over HTTPS; a gRPC-like call to an
// h2c replica streams through with its trailers.
func TestH2OverTLS(t *testing.T) {
	f := newTLSFront(t)
	f.p.SetCerts([]route.Cert{f.cert(t, "shop.example.test", "grpc.example.test")})
	web := newBackend(t, func(w http.ResponseWriter, r *http.Request) {
		io.WriteString(w, r.Header.Get("X-Forwarded-Proto"))
	})
	rw := routeTo("web", web)
	rw.Domains = []string{"shop.example.test"}
	f.p.SetRoute(rw)
	rg := h2cRouteTo("g", newH2CBackend(t, grpcEcho))
	rg.Domains = []string{"grpc.example.test"}
	f.p.SetRoute(rg)

	tr := &http.Transport{TLSClientConfig: &tls.Config{RootCAs: f.ca.Pool()}, ForceAttemptHTTP2: true}
	t.Cleanup(tr.CloseIdleConnections)
	c := &http.Client{Transport: tr}
	_, port, _ := net.SplitHostPort(f.tlsAddr)
	dial := func(ctx context.Context, network, addr string) (net.Conn, error) {
		return (&net.Dialer{}).DialContext(ctx, network, f.tlsAddr)
	}
	tr.DialContext = dial
	resp, err := c.Get("https://shop.example.test:" + port + "/")
	if err != nil {
		t.Fatal(err)
	}
	b, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.ProtoMajor != 2 || string(b) != "https" {
		t.Fatalf("GET over TLS: %s, X-Forwarded-Proto %q", resp.Proto, b)
	}
	req, _ := http.NewRequest("POST", "https://grpc.example.test:"+port+"/echo.Echo/Chat", strings.NewReader("hello\n"))
	req.Header.Set("Content-Type", "application/grpc")
	resp, err = c.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	b, _ = io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.ProtoMajor != 2 || string(b) != "echo hello\n" || resp.Trailer.Get("Grpc-Status") != "0" {
		t.Fatalf("call over TLS: %s %q, trailers %v", resp.Proto, b, resp.Trailer)
	}
}

// A gRPC error answered in headers alone (trailers-only: one HEADERS frame
// that ends the stream) reaches the client with its status in trailers,
// where gRPC clients read it once the headers went out on their own.
func TestH2CGRPCTrailersOnlyStatus(t *testing.T) {
	f := newFront(t, Options{})
	f.p.SetRoute(h2cRouteTo("g", newH2CBackend(t, func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/grpc")
		w.Header().Set("Grpc-Status", "3")
		w.Header().Set("Grpc-Message", "count -1: must be 0-1000")
		w.WriteHeader(200)
	})))
	req := f.req(t, "POST", "g.localhost", "/grpcecho.Echo/Count", strings.NewReader("x"))
	req.Header.Set("Content-Type", "application/grpc")
	resp, err := h2cClient(t).Do(req)
	if err != nil {
		t.Fatal(err)
	}
	io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	if resp.Header.Get("Grpc-Status") != "" || resp.Trailer.Get("Grpc-Status") != "3" ||
		resp.Trailer.Get("Grpc-Message") != "count -1: must be 0-1000" {
		t.Fatalf("headers %v, trailers %v", resp.Header, resp.Trailer)
	}
}
