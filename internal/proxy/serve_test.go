package proxy

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/shoal-run/shoal/internal/route"
)

// rawConn is a client connection to the proxy spoken to byte by byte.
type rawConn struct {
	t  *testing.T
	c  net.Conn
	br *bufio.Reader
}

func (f *front) dial(t *testing.T) *rawConn {
	t.Helper()
	c, err := net.Dial("tcp", f.addr)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	c.SetDeadline(time.Now().Add(10 * time.Second)) // a hang guard
	return &rawConn{t: t, c: c, br: bufio.NewReader(c)}
}

func (rc *rawConn) send(s string) {
	rc.t.Helper()
	if _, err := io.WriteString(rc.c, s); err != nil {
		rc.t.Fatal(err)
	}
}

// read reads one answer to a request with the given method.
func (rc *rawConn) read(method string) (*http.Response, string) {
	rc.t.Helper()
	resp, err := http.ReadResponse(rc.br, &http.Request{Method: method})
	if err != nil {
		rc.t.Fatalf("reading the answer: %v", err)
	}
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		rc.t.Fatalf("reading the answer body: %v", err)
	}
	return resp, string(b)
}

// closed tells whether the proxy closed the connection.
func (rc *rawConn) closed() bool {
	_, err := rc.br.ReadByte()
	return errors.Is(err, io.EOF)
}

// echo answers method, path, and body.
func echo(t *testing.T) *backend {
	return newBackend(t, func(w http.ResponseWriter, r *http.Request) {
		b, _ := io.ReadAll(r.Body)
		fmt.Fprintf(w, "%s %s %s", r.Method, r.URL.RequestURI(), b)
	})
}

func TestServePipelined(t *testing.T) {
	f := newFront(t, Options{})
	f.p.SetRoute(routeTo("a", echo(t)))
	rc := f.dial(t)
	rc.send("GET /1 HTTP/1.1\r\nHost: a.localhost\r\n\r\n" +
		"POST /2?x=y HTTP/1.1\r\nHost: a.localhost\r\nContent-Length: 4\r\n\r\nbody" +
		"GET /3 HTTP/1.1\r\nhost: A.LOCALHOST\r\n\r\n" +
		"GET /4 HTTP/1.1\r\nHost: nope.localhost\r\n\r\n" +
		"GET /5 HTTP/1.1\r\nHost: a.localhost\r\n\r\n")
	for _, want := range []string{"GET /1 ", "POST /2?x=y body", "GET /3 ", "404", "GET /5 "} {
		resp, body := rc.read("GET")
		if want == "404" {
			if resp.StatusCode != 404 {
				t.Fatalf("unknown host: %d %q", resp.StatusCode, body)
			}
			continue
		}
		if resp.StatusCode != 200 || body != want {
			t.Fatalf("pipelined answer %d %q, want 200 %q", resp.StatusCode, body, want)
		}
	}
	if st := f.p.Load("a"); st.Requests != 4 || st.InFlight != 0 {
		t.Fatalf("stats %+v", st)
	}
}

func TestServeChunkedAnswer(t *testing.T) {
	f := newFront(t, Options{})
	b := newBackend(t, func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Trailer", "X-Sum")
		for i := range 3 {
			fmt.Fprintf(w, "part%d;", i)
			w.(http.Flusher).Flush()
		}
		w.Header().Set("X-Sum", "3 parts")
	})
	f.p.SetRoute(routeTo("a", b))
	rc := f.dial(t)
	for range 2 { // the connection carries on after a chunked answer
		rc.send("GET / HTTP/1.1\r\nHost: a.localhost\r\n\r\n")
		resp, body := rc.read("GET")
		if resp.StatusCode != 200 || body != "part0;part1;part2;" {
			t.Fatalf("chunked answer: %d %q", resp.StatusCode, body)
		}
		if len(resp.TransferEncoding) != 1 || resp.TransferEncoding[0] != "chunked" {
			t.Fatalf("answer coding %v, want chunked", resp.TransferEncoding)
		}
		if got := resp.Trailer.Get("X-Sum"); got != "3 parts" {
			t.Fatalf("trailer X-Sum = %q", got)
		}
	}
}

func TestServeCloseDelimitedAnswer(t *testing.T) {
	f := newFront(t, Options{})
	b := newBackend(t, func(w http.ResponseWriter, r *http.Request) {
		conn, brw, err := http.NewResponseController(w).Hijack()
		if err != nil {
			return
		}
		defer conn.Close()
		brw.WriteString("HTTP/1.1 200 OK\r\nX-Old: yes\r\n\r\nuntil the end")
		brw.Flush()
	})
	f.p.SetRoute(routeTo("a", b))
	rc := f.dial(t)
	for range 2 {
		rc.send("GET / HTTP/1.1\r\nHost: a.localhost\r\n\r\n")
		resp, body := rc.read("GET")
		if resp.StatusCode != 200 || body != "until the end" || resp.Header.Get("X-Old") != "yes" || resp.Close {
			t.Fatalf("close-delimited answer: %d %q %v close=%v", resp.StatusCode, body, resp.Header, resp.Close)
		}
	}
}

func TestServeBodilessAnswers(t *testing.T) {
	f := newFront(t, Options{})
	b := newBackend(t, func(w http.ResponseWriter, r *http.Request) {
		switch r.URL.Path {
		case "/304":
			w.Header().Set("ETag", `"v1"`)
			w.WriteHeader(http.StatusNotModified)
		case "/204":
			w.WriteHeader(http.StatusNoContent)
		default:
			io.WriteString(w, "twelve bytes")
		}
	})
	f.p.SetRoute(routeTo("a", b))
	rc := f.dial(t)
	rc.send("HEAD / HTTP/1.1\r\nHost: a.localhost\r\n\r\n")
	resp, body := rc.read("HEAD")
	if resp.StatusCode != 200 || body != "" || resp.ContentLength != 12 {
		t.Fatalf("HEAD: %d %q length %d", resp.StatusCode, body, resp.ContentLength)
	}
	rc.send("GET /304 HTTP/1.1\r\nHost: a.localhost\r\nIf-None-Match: \"v1\"\r\n\r\n")
	if resp, body = rc.read("GET"); resp.StatusCode != 304 || body != "" || resp.Header.Get("ETag") != `"v1"` {
		t.Fatalf("304: %d %q %v", resp.StatusCode, body, resp.Header)
	}
	rc.send("DELETE /204 HTTP/1.1\r\nHost: a.localhost\r\n\r\n")
	if resp, body = rc.read("DELETE"); resp.StatusCode != 204 || body != "" {
		t.Fatalf("204: %d %q", resp.StatusCode, body)
	}
	rc.send("GET / HTTP/1.1\r\nHost: a.localhost\r\n\r\n")
	if resp, body = rc.read("GET"); resp.StatusCode != 200 || body != "twelve bytes" {
		t.Fatalf("GET after bodiless answers: %d %q", resp.StatusCode, body)
	}
}

func TestServeConnectionClose(t *testing.T) {
	f := newFront(t, Options{})
	var conns atomic.Int64
	srv := httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/bye" {
			w.Header().Set("Connection", "close")
		}
		io.WriteString(w, r.URL.Path)
	}))
	srv.Config.ConnState = func(_ net.Conn, s http.ConnState) {
		if s == http.StateNew {
			conns.Add(1)
		}
	}
	srv.Start()
	t.Cleanup(srv.Close)
	f.p.SetRoute(route.Route{App: "a", Endpoints: []route.Endpoint{{ID: "a", Addr: srv.Listener.Addr().String()}}})

	// The replica closes its connection: the client's stays open.
	rc := f.dial(t)
	for _, path := range []string{"/bye", "/bye", "/x"} {
		rc.send("GET " + path + " HTTP/1.1\r\nHost: a.localhost\r\n\r\n")
		resp, body := rc.read("GET")
		if resp.StatusCode != 200 || body != path || resp.Close {
			t.Fatalf("GET %s: %d %q close=%v", path, resp.StatusCode, body, resp.Close)
		}
	}
	if n := conns.Load(); n != 3 {
		t.Errorf("replica saw %d connections, want 3 (a new one after each close)", n)
	}

	// The client asks to close: the answer says so and the proxy closes.
	rc = f.dial(t)
	rc.send("GET /x HTTP/1.1\r\nHost: a.localhost\r\nConnection: close\r\n\r\n")
	resp, body := rc.read("GET")
	if resp.StatusCode != 200 || body != "/x" || !resp.Close {
		t.Fatalf("Connection: close: %d %q close=%v", resp.StatusCode, body, resp.Close)
	}
	if !rc.closed() {
		t.Fatal("the proxy kept a connection the client asked to close")
	}
}

func TestServeBodyLimitKeepsConnection(t *testing.T) {
	f := newFront(t, Options{})
	r := routeTo("a", echo(t))
	r.MaxBodyBytes = 10
	f.p.SetRoute(r)
	rc := f.dial(t)
	rc.send("POST / HTTP/1.1\r\nHost: a.localhost\r\nContent-Length: 10\r\n\r\n0123456789")
	if resp, body := rc.read("POST"); resp.StatusCode != 200 || body != "POST / 0123456789" {
		t.Fatalf("body at the limit: %d %q", resp.StatusCode, body)
	}
	rc.send("POST / HTTP/1.1\r\nHost: a.localhost\r\nContent-Length: 11\r\n\r\n0123456789A")
	resp, body := rc.read("POST")
	if resp.StatusCode != 413 || apiError(t, body).Field != "body" || resp.Close {
		t.Fatalf("one byte over: %d %q close=%v", resp.StatusCode, body, resp.Close)
	}
	// The refused body was skipped: the next request is read whole.
	rc.send("GET /next HTTP/1.1\r\nHost: a.localhost\r\n\r\n")
	if resp, body := rc.read("GET"); resp.StatusCode != 200 || body != "GET /next " {
		t.Fatalf("after 413: %d %q", resp.StatusCode, body)
	}
	// A large body over the limit ends the connection after the answer.
	rc.send(fmt.Sprintf("POST / HTTP/1.1\r\nHost: a.localhost\r\nContent-Length: %d\r\n\r\n", maxDrain+1))
	if resp, _ := rc.read("POST"); resp.StatusCode != 413 || !resp.Close {
		t.Fatalf("large body over the limit: %d close=%v", resp.StatusCode, resp.Close)
	}
}

func TestServeLargeBodyStreams(t *testing.T) {
	f := newFront(t, Options{})
	f.p.SetRoute(routeTo("a", newBackend(t, func(w http.ResponseWriter, r *http.Request) {
		n, _ := io.Copy(io.Discard, r.Body)
		fmt.Fprint(w, n)
	})))
	for _, n := range []int{inlineBody, inlineBody + 1, 3 << 20} {
		code, body, _ := f.do(t, f.req(t, "PUT", "a.localhost", "/", strings.NewReader(strings.Repeat("z", n))))
		if code != 200 || body != fmt.Sprint(n) {
			t.Fatalf("%d-byte body: %d %q", n, code, body)
		}
	}
}

func TestServeHandsOffToNetHTTP(t *testing.T) {
	f := newFront(t, Options{})
	var seen atomic.Value
	f.p.SetRoute(routeTo("a", newBackend(t, func(w http.ResponseWriter, r *http.Request) {
		seen.Store(r.Header.Get("Cookie"))
		b, _ := io.ReadAll(r.Body)
		fmt.Fprintf(w, "%s %s %s", r.Method, r.URL.RequestURI(), b)
	})))
	for _, tc := range []struct{ name, req, method, want string }{
		{"HTTP/1.0", "GET /old HTTP/1.0\r\nHost: a.localhost\r\n\r\n", "GET", "GET /old "},
		{"absolute URI", "GET http://a.localhost/abs HTTP/1.1\r\nHost: a.localhost\r\n\r\n", "GET", "GET /abs "},
		{"Expect", "POST /e HTTP/1.1\r\nHost: a.localhost\r\nExpect: 100-continue\r\nContent-Length: 2\r\n\r\nok", "POST", "POST /e ok"},
		{"chunked upload", "POST /c HTTP/1.1\r\nHost: a.localhost\r\nTransfer-Encoding: chunked\r\n\r\n3\r\nabc\r\n0\r\n\r\n", "POST", "POST /c abc"},
		{"bare LF", "GET /lf HTTP/1.1\nHost: a.localhost\n\n", "GET", "GET /lf "},
		{"large head", "GET /big HTTP/1.1\r\nHost: a.localhost\r\nCookie: " + strings.Repeat("c", 6<<10) + "\r\n" +
			strings.Repeat("X-Pad: "+strings.Repeat("p", 5<<10)+"\r\n", 3) + "\r\n", "GET", "GET /big "},
	} {
		rc := f.dial(t)
		rc.send(tc.req)
		resp, body := rc.read(tc.method)
		if resp.StatusCode == 100 {
			resp, body = rc.read(tc.method)
		}
		if resp.StatusCode != 200 || body != tc.want {
			t.Errorf("%s: %d %q, want 200 %q", tc.name, resp.StatusCode, body, tc.want)
		}
	}
	if c, _ := seen.Load().(string); len(c) != 6<<10 {
		t.Errorf("the large head's cookie reached the replica with %d bytes", len(c))
	}
}

func TestServeBadRequests(t *testing.T) {
	f := newFront(t, Options{})
	f.p.SetRoute(routeTo("a", echo(t)))
	for _, tc := range []struct {
		name, req string
		code      int
	}{
		{"malformed request line", "GARBAGE\r\n\r\n", 400},
		{"no Host", "GET / HTTP/1.1\r\n\r\n", 400},
		{"two Hosts", "GET / HTTP/1.1\r\nHost: a.localhost\r\nHost: b.localhost\r\n\r\n", 400},
		{"bad header name", "GET / HTTP/1.1\r\nHost: a.localhost\r\nBad Name: x\r\n\r\n", 400},
		{"two lengths", "POST / HTTP/1.1\r\nHost: a.localhost\r\nContent-Length: 1\r\nContent-Length: 2\r\n\r\nab", 400},
		{"head too large", "GET / HTTP/1.1\r\nHost: a.localhost\r\nX-Big: " + strings.Repeat("b", 2<<20) + "\r\n\r\n", 431},
	} {
		rc := f.dial(t)
		go io.WriteString(rc.c, tc.req) // the proxy may answer before it read everything
		resp, err := http.ReadResponse(rc.br, nil)
		if err != nil {
			t.Fatalf("%s: %v", tc.name, err)
		}
		if resp.StatusCode != tc.code {
			t.Errorf("%s: %d, want %d", tc.name, resp.StatusCode, tc.code)
		}
	}
	if st := f.p.Load("a"); st.Requests != 0 {
		t.Errorf("bad requests reached the app: %+v", st)
	}
}

func TestServeLargeAnswerHead(t *testing.T) {
	f := newFront(t, Options{})
	big := strings.Repeat("h", 12<<10)
	f.p.SetRoute(routeTo("a", newBackend(t, func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("X-Big", big)
		w.Header().Set("Connection", "X-Gone")
		w.Header().Set("X-Gone", "hop")
		io.WriteString(w, "fine")
	})))
	rc := f.dial(t)
	for range 2 {
		rc.send("GET / HTTP/1.1\r\nHost: a.localhost\r\n\r\n")
		resp, body := rc.read("GET")
		if resp.StatusCode != 200 || body != "fine" || resp.Header.Get("X-Big") != big || resp.Header.Get("X-Gone") != "" {
			t.Fatalf("large answer head: %d %q X-Gone %q", resp.StatusCode, body, resp.Header.Get("X-Gone"))
		}
	}
}

func TestServeClientGoneMidAnswer(t *testing.T) {
	f := newFront(t, Options{})
	canceled := make(chan struct{})
	b := newBackend(t, func(w http.ResponseWriter, r *http.Request) {
		io.WriteString(w, "first\n")
		w.(http.Flusher).Flush()
		<-r.Context().Done() // the proxy closed the replica's connection
		close(canceled)
	})
	f.p.SetRoute(routeTo("a", b))
	rc := f.dial(t)
	rc.send("GET / HTTP/1.1\r\nHost: a.localhost\r\n\r\n")
	resp, err := http.ReadResponse(rc.br, nil)
	if err != nil {
		t.Fatal(err)
	}
	line, err := bufio.NewReader(resp.Body).ReadString('\n')
	if err != nil || line != "first\n" {
		t.Fatalf("first line %q, %v", line, err)
	}
	rc.c.Close()
	recv(t, canceled, "the replica's request to end")
	eventually(t, "in-flight to drop", func() bool { return f.p.Load("a").InFlight == 0 })
}

func TestShutdownDrains(t *testing.T) {
	p := New(Options{Logger: slog.New(slog.NewTextHandler(io.Discard, nil))})
	release := make(chan struct{})
	started := make(chan struct{}, 1)
	p.SetRoute(routeTo("a", newBackend(t, func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/slow" {
			started <- struct{}{}
			<-release
		}
		io.WriteString(w, "done")
	})))
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	served := make(chan error, 1)
	go func() { served <- p.Serve(l) }()
	f := &front{p: p, addr: l.Addr().String()}
	idle := f.dial(t)
	idle.send("GET / HTTP/1.1\r\nHost: a.localhost\r\n\r\n")
	if resp, body := idle.read("GET"); resp.StatusCode != 200 || body != "done" {
		t.Fatalf("first request: %d %q", resp.StatusCode, body)
	}
	busy := f.dial(t)
	busy.send("GET /slow HTTP/1.1\r\nHost: a.localhost\r\n\r\n")
	recv(t, started, "the slow request")

	shut := make(chan error, 1)
	go func() { shut <- p.Shutdown(context.Background()) }()
	if err := recv(t, served, "Serve to return"); err != http.ErrServerClosed {
		t.Fatalf("Serve returned %v", err)
	}
	if !idle.closed() {
		t.Fatal("an idle connection stayed open on shutdown")
	}
	select {
	case err := <-shut:
		t.Fatalf("Shutdown returned (%v) with a request in flight", err)
	default:
	}
	close(release)
	resp, body := busy.read("GET")
	if resp.StatusCode != 200 || body != "done" || !resp.Close {
		t.Fatalf("request in flight at shutdown: %d %q close=%v", resp.StatusCode, body, resp.Close)
	}
	if err := recv(t, shut, "Shutdown"); err != nil {
		t.Fatal(err)
	}
	if !busy.closed() {
		t.Fatal("the connection stayed open after its last answer")
	}
	if err := p.Serve(l); err != http.ErrServerClosed {
		t.Fatalf("Serve after Shutdown = %v", err)
	}
}

// shortFront is a front whose client connections time out quickly.
func shortFront(t *testing.T, to timeouts) *front {
	p := New(Options{Logger: slog.New(slog.NewTextHandler(io.Discard, nil))})
	p.front.timeouts = to // before Serve
	addr := serveProxy(t, p)
	return &front{p: p, addr: addr, url: "http://" + addr}
}

func TestServeSlowClientLetsGo(t *testing.T) {
	f := shortFront(t, timeouts{header: time.Minute, idle: time.Minute, io: 200 * time.Millisecond})
	const size = 256 << 20
	ended := make(chan struct{})
	f.p.SetRoute(routeTo("a", newBackend(t, func(w http.ResponseWriter, r *http.Request) {
		defer close(ended)
		w.Header().Set("Content-Length", fmt.Sprint(size))
		chunk := make([]byte, 64<<10)
		for n := 0; n < size; n += len(chunk) {
			if _, err := w.Write(chunk); err != nil {
				return
			}
		}
	})))
	rc := f.dial(t)
	rc.send("GET / HTTP/1.1\r\nHost: a.localhost\r\n\r\n")
	// The client reads nothing: the proxy gives up on it and lets the
	// replica's connection go.
	recv(t, ended, "the replica's handler to end")
	eventually(t, "in-flight to drop", func() bool { return f.p.Load("a").InFlight == 0 })
}

func TestServeHeadAndIdleTimeouts(t *testing.T) {
	f := shortFront(t, timeouts{header: 100 * time.Millisecond, idle: 100 * time.Millisecond, io: time.Minute})
	f.p.SetRoute(routeTo("a", echo(t)))
	rc := f.dial(t)
	rc.send("GET / HTTP/1.1\r\nHo")
	if !rc.closed() {
		t.Fatal("a connection with half a head stayed open past the head timeout")
	}
	rc = f.dial(t)
	rc.send("GET / HTTP/1.1\r\nHost: a.localhost\r\n\r\n")
	if resp, body := rc.read("GET"); resp.StatusCode != 200 || body != "GET / " {
		t.Fatalf("GET: %d %q", resp.StatusCode, body)
	}
	if !rc.closed() {
		t.Fatal("an idle connection stayed open past the idle timeout")
	}
}
