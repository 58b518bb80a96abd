package proxy

import (
	"bytes"
	"io"
	"log/slog"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/shoal-run/shoal/internal/clock"
)

// fakeFront is a front on a fake clock.
func fakeFront(t *testing.T, o Options) (*front, *clock.Fake) {
	t.Helper()
	fc := clock.NewFake(time.Unix(1000, 0))
	o.Clock = fc
	return newFront(t, o), fc
}

// A body trickled a few bytes at a time is read before its request is
// admitted: the app never counts it (so it neither holds an in-flight slot
// nor scales the app), no replica sees it, and once the grace is over
// without the minimum rate the connection is cut.
func TestServeTrickledBodyNotAdmitted(t *testing.T) {
	for _, tc := range []struct{ name, head, part string }{
		{"fast", "POST / HTTP/1.1\r\nHost: a.localhost\r\nContent-Length: 100\r\n\r\n", "0123456789"},
		{"chunked", "POST / HTTP/1.1\r\nHost: a.localhost\r\nTransfer-Encoding: chunked\r\n\r\n", "64\r\n0123456789"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			f, fc := fakeFront(t, Options{})
			b := echo(t)
			f.p.SetRoute(routeTo("a", b))
			rc := f.dial(t)
			rc.send(tc.head + tc.part)
			eventually(t, "the upload guard", func() bool { return fc.Timers() > 0 })
			if l := f.p.Load("a"); l.InFlight != 0 || l.Requests != 0 {
				t.Fatalf("a trickled body counts on its app: %+v", l)
			}
			fc.Advance(DefaultUploadGrace + time.Second)
			if !rc.closed() {
				t.Fatal("a body slower than the minimum rate kept its connection")
			}
			if l := f.p.Load("a"); l.Requests != 0 || b.hits.Load() != 0 {
				t.Fatalf("a cut body reached the app: %d requests, %d at the replica", l.Requests, b.hits.Load())
			}
		})
	}
}

// A large body admitted after its first bytes is cut when it falls below
// the minimum rate; one that keeps up is not.
func TestServeSlowLargeUploadCut(t *testing.T) {
	f, fc := fakeFront(t, Options{})
	got := make(chan error, 1)
	f.p.SetRoute(routeTo("a", newBackend(t, func(w http.ResponseWriter, r *http.Request) {
		_, err := io.Copy(io.Discard, r.Body)
		got <- err
	})))
	rc := f.dial(t)
	rc.send("POST / HTTP/1.1\r\nHost: a.localhost\r\nContent-Length: 100000\r\n\r\n" + strings.Repeat("x", inlineBody+1000))
	eventually(t, "the request to reach the replica", func() bool { return f.p.Load("a").InFlight == 1 })
	n := f.p.front.guardChecks.Load()
	fc.Advance(DefaultUploadGrace + time.Second) // 17 KiB in 11 s: fast enough
	eventually(t, "the guard's check", func() bool { return f.p.front.guardChecks.Load() > n })
	fc.Advance(20 * time.Second) // 17 KiB in 31 s: too slow
	if !rc.closed() {
		t.Fatal("a slow upload kept its connection")
	}
	if err := recv(t, got, "the replica's read"); err == nil {
		t.Fatal("the replica read a whole body")
	}
	eventually(t, "in-flight to drop", func() bool { return f.p.Load("a").InFlight == 0 })
}

// A malformed chunked body is the client's mistake: 400, and no replica
// sees the request (or, when the error comes after the first bytes went
// to one, still 400, never 502 against the app).
func TestServeBadChunkedBody(t *testing.T) {
	f := newFront(t, Options{})
	b := echo(t)
	f.p.SetRoute(routeTo("a", b))
	rc := f.dial(t)
	rc.send("POST / HTTP/1.1\r\nHost: a.localhost\r\nTransfer-Encoding: chunked\r\n\r\nzz\r\nabc\r\n0\r\n\r\n")
	resp, body := rc.read("POST")
	if resp.StatusCode != 400 || apiError(t, body).Field != "body" {
		t.Fatalf("malformed chunk: %d %q, want 400", resp.StatusCode, body)
	}
	if n := b.hits.Load(); n != 0 {
		t.Fatalf("the replica got %d requests", n)
	}
	rc = f.dial(t)
	big := strings.Repeat("y", inlineBody+1000)
	rc.send("POST / HTTP/1.1\r\nHost: a.localhost\r\nTransfer-Encoding: chunked\r\n\r\n" +
		strconv.FormatInt(int64(len(big)), 16) + "\r\n" + big + "\r\nzz\r\n")
	if resp, body := rc.read("POST"); resp.StatusCode != 400 {
		t.Fatalf("malformed chunk after the first bytes: %d %q, want 400", resp.StatusCode, body)
	}
}

// syncBuf is a log destination tests read.
type syncBuf struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuf) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuf) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

// Log lines about client mistakes pass a burst, then one a second, and
// the lines dropped are counted.
func TestClientMistakesRateLimited(t *testing.T) {
	var out syncBuf
	f, fc := fakeFront(t, Options{Logger: slog.New(slog.NewTextHandler(&out, nil))})
	f.p.SetRoute(routeTo("a", echo(t)))
	mistake := func() {
		rc := f.dial(t)
		rc.send("POST / HTTP/1.1\r\nHost: a.localhost\r\nTransfer-Encoding: chunked\r\n\r\nzz\r\n")
		if resp, _ := rc.read("POST"); resp.StatusCode != 400 {
			t.Fatalf("status %d", resp.StatusCode)
		}
	}
	for range 30 {
		mistake()
	}
	if n := strings.Count(out.String(), "request body refused"); n != mistakeBurst {
		t.Fatalf("%d lines for 30 mistakes, want %d:\n%s", n, mistakeBurst, out.String())
	}
	fc.Advance(mistakeEvery)
	mistake()
	if n := strings.Count(out.String(), "request body refused"); n != mistakeBurst+1 {
		t.Fatalf("%d lines after a second, want %d", n, mistakeBurst+1)
	}
	if !strings.Contains(out.String(), "suppressed") || !strings.Contains(out.String(), "lines=20") {
		t.Fatalf("no count of the dropped lines:\n%s", out.String())
	}
}
