package proxy

import (
	"bufio"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/shoal-run/shoal/internal/route"
)

// page is the well-formed answer of the replicas below to a request for
// path: its X-Page header and body name the path.
func page(path string) string {
	body := "page for " + path
	return "HTTP/1.1 200 OK\r\nX-Page: " + path + "\r\nContent-Length: " + strconv.Itoa(len(body)) + "\r\n\r\n" + body
}

// mixCase is a replica that misbehaves on the first user's request (for
// /u1): every other request gets page.
type mixCase struct {
	name   string
	method string // of the first user's request; GET when empty
	// answer is written to the first user's request.
	answer string
	// idle is written on that connection once the proxy relayed the
	// answer and has the connection idle; closeIdle closes it then.
	idle      string
	closeIdle bool
	// next is written on that connection before the answer to the next
	// request on it.
	next string
}

var mixCases = []mixCase{
	{name: "extra answer after the length", answer: page("/u1") + page("/u1")},
	{name: "extra answer while idle", answer: page("/u1"), idle: page("/u1")},
	{name: "extra answer after the last chunk",
		answer: "HTTP/1.1 200 OK\r\nX-Page: /u1\r\nTransfer-Encoding: chunked\r\n\r\n" +
			"c\r\npage for /u1\r\n0\r\n\r\n" + page("/u1")},
	{name: "body longer than its length",
		answer: "HTTP/1.1 200 OK\r\nX-Page: /u1\r\nContent-Length: 12\r\n\r\npage for /u1 and more\r\n\r\n" + page("/u1")},
	{name: "garbage after the answer", answer: page("/u1") + "garbage\r\n"},
	{name: "body on a HEAD answer", method: "HEAD", answer: page("/u1")},
	{name: "chunked end on a HEAD answer", method: "HEAD",
		answer: "HTTP/1.1 200 OK\r\nX-Page: /u1\r\nTransfer-Encoding: chunked\r\n\r\n0\r\n\r\n"},
	{name: "body on a 204",
		answer: "HTTP/1.1 204 No Content\r\nX-Page: /u1\r\n\r\n" + page("/u1")},
	{name: "body on a 304",
		answer: "HTTP/1.1 304 Not Modified\r\nX-Page: /u1\r\nContent-Length: " + strconv.Itoa(len(page("/u1"))) + "\r\n\r\n" + page("/u1")},
	{name: "length and chunked",
		answer: "HTTP/1.1 200 OK\r\nX-Page: /u1\r\nContent-Length: " + strconv.Itoa(5+len(page("/u1"))) +
			"\r\nTransfer-Encoding: chunked\r\n\r\n0\r\n\r\n",
		next: page("/u1")},
	{name: "unsolicited 408 then close", answer: page("/u1"),
		idle: "HTTP/1.1 408 Request Timeout\r\nConnection: close\r\nContent-Length: 0\r\n\r\n", closeIdle: true},
	{name: "unsolicited 408 kept open", answer: page("/u1"),
		idle: "HTTP/1.1 408 Request Timeout\r\nContent-Length: 0\r\n\r\n"},
}

// mixReplica is a raw TCP replica playing one mixCase.
type mixReplica struct {
	c        mixCase
	addr     string
	idleNow  chan struct{} // closed by the test: write c.idle
	idleSent chan struct{} // closed by the replica once c.idle was written
}

func newMixReplica(t *testing.T, c mixCase) *mixReplica {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	r := &mixReplica{c: c, addr: l.Addr().String(), idleNow: make(chan struct{}), idleSent: make(chan struct{})}
	var wg sync.WaitGroup
	var mu sync.Mutex
	var conns []net.Conn
	t.Cleanup(func() {
		l.Close()
		mu.Lock()
		for _, c := range conns {
			c.Close()
		}
		mu.Unlock()
		wg.Wait()
	})
	wg.Add(1)
	go func() {
		defer wg.Done()
		for {
			c, err := l.Accept()
			if err != nil {
				return
			}
			mu.Lock()
			conns = append(conns, c)
			mu.Unlock()
			wg.Add(1)
			go func() {
				defer wg.Done()
				defer c.Close()
				r.serve(c)
			}()
		}
	}()
	return r
}

func (r *mixReplica) serve(c net.Conn) {
	br := bufio.NewReader(c)
	next := ""
	for {
		req, err := http.ReadRequest(br)
		if err != nil {
			return
		}
		io.Copy(io.Discard, req.Body)
		if req.URL.Path != "/u1" {
			if _, err := io.WriteString(c, next+page(req.URL.Path)); err != nil {
				return
			}
			next = ""
			continue
		}
		if _, err := io.WriteString(c, r.c.answer); err != nil {
			return
		}
		next = r.c.next
		if r.c.idle != "" {
			<-r.idleNow
			io.WriteString(c, r.c.idle)
			close(r.idleSent)
			if r.c.closeIdle {
				return
			}
		}
	}
}

// A replica that misbehaves (bytes past its answer's framing, a body where
// none may be, both a length and chunked coding, an answer nobody asked
// for) never makes the proxy give one user the answer to another's
// request, on either engine: the fast path, and net/http's leg with bodies
// of known length and chunked.
func TestAnswersNeverMix(t *testing.T) {
	paths := []struct {
		name    string
		chunked bool // the users' requests carry a chunked body
		front   func(t *testing.T, p *Proxy) string
	}{
		{name: "fast", front: func(t *testing.T, p *Proxy) string { return serveProxy(t, p) }},
		{name: "net/http", front: serveHTTP},
		{name: "net/http chunked", chunked: true, front: serveHTTP},
	}
	for _, path := range paths {
		for _, c := range mixCases {
			t.Run(path.name+"/"+c.name, func(t *testing.T) {
				rep := newMixReplica(t, c)
				p := New(Options{Logger: slog.New(slog.NewTextHandler(io.Discard, nil))})
				p.SetRoute(route.Route{App: "a", Endpoints: []route.Endpoint{{ID: "a-1", Addr: rep.addr}}})
				addr := path.front(t, p)
				ep := (*p.apps.Load())["a"].eps["a-1"]

				m1 := c.method
				if m1 == "" {
					m1 = "GET"
				}
				code, hdr, body := mixUser(t, addr, m1, "/u1", path.chunked)
				if got := hdr.Get("X-Page"); (code < 500 && got != "/u1") || (body != "" && body != "page for /u1") {
					t.Errorf("user 1: %d, X-Page %q, body %q; want its own answer", code, got, body)
				}
				// The proxy is done with the first request's connection
				// (kept idle or closed) before the next user comes.
				eventually(t, "the replica connection to settle", func() bool {
					ep.pool.mu.Lock()
					defer ep.pool.mu.Unlock()
					return len(ep.pool.live) == len(ep.pool.idle)
				})
				if c.idle != "" {
					close(rep.idleNow)
					recv(t, rep.idleSent, "the replica's unsolicited bytes")
				}
				code, hdr, body = mixUser(t, addr, "GET", "/u2", path.chunked)
				if code != 200 || hdr.Get("X-Page") != "/u2" || body != "page for /u2" {
					t.Errorf("user 2: %d, X-Page %q, body %q; want 200 and page for /u2", code, hdr.Get("X-Page"), body)
				}
			})
		}
	}
}

// serveHTTP serves p as an http.Handler (ServeHTTP under net/http) until
// the test ends and returns its address.
func serveHTTP(t *testing.T, p *Proxy) string {
	srv := httptest.NewServer(p)
	t.Cleanup(srv.Close)
	return strings.TrimPrefix(srv.URL, "http://")
}

// mixUser sends one request from a client connection of its own and
// returns the answer's status, header and body.
func mixUser(t *testing.T, addr, method, path string, chunked bool) (int, http.Header, string) {
	t.Helper()
	c, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	c.SetDeadline(time.Now().Add(20 * time.Second)) // a hang guard
	req := method + " " + path + " HTTP/1.1\r\nHost: a.localhost\r\n"
	if chunked {
		req += "Transfer-Encoding: chunked\r\n\r\n1\r\nx\r\n0\r\n\r\n"
	} else {
		req += "\r\n"
	}
	if _, err := io.WriteString(c, req); err != nil {
		t.Fatal(err)
	}
	resp, err := http.ReadResponse(bufio.NewReader(c), &http.Request{Method: method})
	if err != nil {
		t.Fatalf("%s %s: %v", method, path, err)
	}
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatalf("%s %s: body: %v", method, path, err)
	}
	return resp.StatusCode, resp.Header, string(b)
}
