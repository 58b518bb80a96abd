package proxy

import (
	"io"
	"log/slog"
	"net"
	"net/http"
	"sync"
	"syscall"
	"testing"
	"time"
)

// fdListener stands for a process with few descriptors: Accept fails with
// EMFILE while max connections it returned are open.
type fdListener struct {
	net.Listener
	mu   sync.Mutex
	open int
	max  int
}

func (l *fdListener) Accept() (net.Conn, error) {
	l.mu.Lock()
	full := l.open >= l.max
	if !full {
		l.open++
	}
	l.mu.Unlock()
	if full {
		return nil, &net.OpError{Op: "accept", Net: "tcp", Err: syscall.EMFILE}
	}
	c, err := l.Listener.Accept()
	if err != nil {
		l.closed()
		return nil, err
	}
	return &fdConn{Conn: c, l: l}, nil
}

func (l *fdListener) closed() {
	l.mu.Lock()
	l.open--
	l.mu.Unlock()
}

type fdConn struct {
	net.Conn
	l    *fdListener
	once sync.Once
}

func (c *fdConn) Close() error {
	c.once.Do(c.l.closed)
	return c.Conn.Close()
}

// floodFront serves p on a listener with room for max connections.
func floodFront(t *testing.T, o Options, max int) *front {
	t.Helper()
	o.Logger = slog.New(slog.NewTextHandler(io.Discard, nil))
	p := New(o)
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- p.Serve(&fdListener{Listener: l, max: max}) }()
	t.Cleanup(func() {
		p.Close()
		<-done
	})
	addr := l.Addr().String()
	tr := &http.Transport{DisableCompression: true}
	t.Cleanup(tr.CloseIdleConnections)
	return &front{p: p, addr: addr, url: "http://" + addr, client: &http.Client{Transport: tr, Timeout: 20 * time.Second}}
}

// flood opens n idle connections to addr from another loopback address.
func flood(t *testing.T, addr string, n int) {
	t.Helper()
	d := net.Dialer{LocalAddr: &net.TCPAddr{IP: net.IPv4(127, 0, 0, 2)}}
	for range n {
		c, err := d.Dial("tcp", addr)
		if err != nil {
			t.Fatalf("flood: %v", err)
		}
		t.Cleanup(func() { c.Close() })
	}
}

// A flood of idle connections from one address neither takes the last
// descriptors nor stops another client: past the per-client cap they are
// closed at once.
func TestServeConnFloodCapped(t *testing.T) {
	f := floodFront(t, Options{Limits: Limits{MaxConnsPerClient: 8}}, 32)
	f.p.SetRoute(routeTo("a", namedBackend(t, "a")))
	flood(t, f.addr, 100)
	if code, body, _ := f.get(t, "a.localhost", "/"); code != 200 || body != "a" {
		t.Fatalf("another client: %d %q", code, body)
	}
}

// Out of descriptors all the same, the proxy closes idle connections of
// the client that holds the most and goes on accepting.
func TestServeOutOfFilesShedsHeaviest(t *testing.T) {
	f := floodFront(t, Options{}, 16)
	f.p.SetRoute(routeTo("a", namedBackend(t, "a")))
	flood(t, f.addr, 60)
	if code, body, _ := f.get(t, "a.localhost", "/"); code != 200 || body != "a" {
		t.Fatalf("another client: %d %q", code, body)
	}
}
