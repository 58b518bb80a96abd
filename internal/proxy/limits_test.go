package proxy

import (
	"fmt"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"
)

// A head over the limit is answered 431 (a request line over the line
// limit 414) and the connection closes; the replica never sees it. A head
// under the limit but over the fast path's buffer is still served.
func TestServeHeadLimits(t *testing.T) {
	f := newFront(t, Options{})
	b := echo(t)
	f.p.SetRoute(routeTo("a", b))
	pad := func(n int) string { return strings.Repeat("x", n) }
	for _, tc := range []struct {
		name, req string
		code      int
	}{
		{"head over 32 KiB", "GET / HTTP/1.1\r\nHost: a.localhost\r\n" + strings.Repeat("X-Pad: "+pad(4000)+"\r\n", 9) + "\r\n", 431},
		{"head of 1 MiB", "GET / HTTP/1.1\r\nHost: a.localhost\r\n" + strings.Repeat("X-Pad: "+pad(4000)+"\r\n", 260) + "\r\n", 431},
		{"request line over 8 KiB", "GET /" + pad(9000) + " HTTP/1.1\r\nHost: a.localhost\r\n\r\n", 414},
		{"header line over 8 KiB", "GET / HTTP/1.1\r\nHost: a.localhost\r\nX-Pad: " + pad(9000) + "\r\n\r\n", 431},
	} {
		t.Run(tc.name, func(t *testing.T) {
			rc := f.dial(t)
			go io.WriteString(rc.c, tc.req) // the proxy may close before reading it all
			resp, body := rc.read("GET")
			if resp.StatusCode != tc.code {
				t.Fatalf("status %d %q, want %d", resp.StatusCode, body, tc.code)
			}
			apiError(t, body)
			if !rc.closed() {
				t.Fatal("the connection stayed open")
			}
		})
	}
	if n := b.hits.Load(); n != 0 {
		t.Fatalf("the replica got %d requests", n)
	}
	// 20 KiB of head, in pieces: over the fast path's buffer, under the
	// limit.
	rc := f.dial(t)
	rc.send("GET /long HTTP/1.1\r\nHost: a.localhost\r\n")
	for range 5 {
		rc.send("X-Pad: " + pad(4000) + "\r\n")
	}
	rc.send("\r\n")
	if resp, body := rc.read("GET"); resp.StatusCode != 200 || body != "GET /long " {
		t.Fatalf("a 20 KiB head: %d %q", resp.StatusCode, body)
	}
}

// headScan finds a head's end however it arrives, and the first line over
// the limit.
func TestHeadScan(t *testing.T) {
	head := "GET / HTTP/1.1\r\nHost: a\r\nX: " + strings.Repeat("y", 20) + "\r\n\r\nBODY"
	for step := 1; step <= len(head); step++ {
		var s headScan
		end, code := 0, 0
		for n := step; end == 0 && code == 0; n = min(n+step, len(head)) {
			end, code = s.scan([]byte(head[:n]), 30)
		}
		if end != len(head)-4 || code != 0 {
			t.Fatalf("step %d: end %d code %d", step, end, code)
		}
		s = headScan{}
		end, code = 0, 0
		for n := step; end == 0 && code == 0; n = min(n+step, len(head)) {
			end, code = s.scan([]byte(head[:n]), 20)
		}
		if code != 431 {
			t.Fatalf("step %d, limit 20: end %d code %d, want 431", step, end, code)
		}
	}
}

// A request with both Content-Length and Transfer-Encoding is refused with
// 400 and the connection closes (RFC 9112 section 6.1), whichever path
// would have read it.
func TestServeCLAndTERefused(t *testing.T) {
	f := newFront(t, Options{})
	b := echo(t)
	f.p.SetRoute(routeTo("a", b))
	for _, req := range []string{
		"POST / HTTP/1.1\r\nHost: a.localhost\r\nContent-Length: 5\r\nTransfer-Encoding: chunked\r\n\r\n0\r\n\r\n",
		"POST / HTTP/1.1\r\nHost: a.localhost\r\nTransfer-Encoding: chunked\r\nContent-Length: 5\r\n\r\n0\r\n\r\n",
		"POST / HTTP/1.1\nHost: a.localhost\nTransfer-Encoding: chunked\nContent-Length: 5\n\n0\r\n\r\n",
		"POST / HTTP/1.1\r\nHost: a.localhost\r\nX-Pad: " + strings.Repeat("x", 8000) + "\r\nTransfer-Encoding: chunked\r\nContent-Length: 5\r\n\r\n0\r\n\r\n",
	} {
		rc := f.dial(t)
		rc.send(req)
		resp, body := rc.read("POST")
		if resp.StatusCode != 400 {
			t.Fatalf("status %d %q, want 400", resp.StatusCode, body)
		}
		if !rc.closed() {
			t.Fatal("the connection stayed open")
		}
	}
	if n := b.hits.Load(); n != 0 {
		t.Fatalf("the replica got %d requests", n)
	}
}

// The forwarded fields reach the replica made from the client's address
// and connection, never as the client sent them, on either engine: the
// fast path and net/http's leg (HTTP/1.0, a chunked upload).
func TestServeForwardedHeadersReplaced(t *testing.T) {
	f := newFront(t, Options{})
	seen := make(chan http.Header, 1)
	f.p.SetRoute(routeTo("a", newBackend(t, func(w http.ResponseWriter, r *http.Request) {
		io.Copy(io.Discard, r.Body)
		seen <- r.Header.Clone()
	})))
	spoof := "X-Real-IP: 203.0.113.7\r\nForwarded: for=203.0.113.7\r\nX-Forwarded-For: 203.0.113.7\r\n" +
		"X-Forwarded-Proto: https\r\nX-Forwarded-Host: evil.test\r\n"
	for _, tc := range []struct{ name, req string }{
		{"fast", "GET / HTTP/1.1\r\nHost: a.localhost\r\n" + spoof + "\r\n"},
		{"net/http", "GET / HTTP/1.0\r\nHost: a.localhost\r\n" + spoof + "\r\n"},
		{"chunked", "POST / HTTP/1.1\r\nHost: a.localhost\r\nTransfer-Encoding: chunked\r\n" + spoof + "\r\n3\r\nabc\r\n0\r\n\r\n"},
	} {
		rc := f.dial(t)
		rc.send(tc.req)
		if resp, body := rc.read("GET"); resp.StatusCode != 200 {
			t.Fatalf("%s: %d %q", tc.name, resp.StatusCode, body)
		}
		h := recv(t, seen, "the replica's request")
		if got := h.Values("X-Real-Ip"); len(got) != 1 || got[0] != "127.0.0.1" {
			t.Errorf("%s: X-Real-IP %q, want 127.0.0.1", tc.name, got)
		}
		if got := h.Values("Forwarded"); len(got) != 1 || got[0] != "for=127.0.0.1;proto=http" {
			t.Errorf("%s: Forwarded %q", tc.name, got)
		}
		if got := strings.Join(h.Values("X-Forwarded-For"), ", "); got != "127.0.0.1" {
			t.Errorf("%s: X-Forwarded-For %q", tc.name, got)
		}
		if got := h.Values("X-Forwarded-Proto"); len(got) != 1 || got[0] != "http" {
			t.Errorf("%s: X-Forwarded-Proto %q", tc.name, got)
		}
		if got := h.Values("X-Forwarded-Host"); len(got) != 1 || got[0] != "a.localhost" {
			t.Errorf("%s: X-Forwarded-Host %q", tc.name, got)
		}
	}
}

// A client that never reads its answer does not hold its request for ever
// on the net/http path either.
func TestServeSlowClientLetsGoNetHTTP(t *testing.T) {
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
	rc.c.SetDeadline(time.Time{})
	rc.send("GET / HTTP/1.0\r\nHost: a.localhost\r\n\r\n") // HTTP/1.0: net/http serves it
	recv(t, ended, "the replica's handler to end")
	eventually(t, "in-flight to drop", func() bool { return f.p.Load("a").InFlight == 0 })
}
