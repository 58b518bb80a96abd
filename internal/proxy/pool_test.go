package proxy

import (
	"context"
	"io"
	"net"
	"net/http"
	"sync/atomic"
	"testing"
	"time"

	"github.com/shoal-run/shoal/internal/clock"
)

// An idle replica connection is reused while it is young and closed once
// it was idle for idleTimeout, whether or not a request comes.
func TestIdleReplicaConnectionsExpire(t *testing.T) {
	var opened, closed atomic.Int64
	be := newBackend(t, func(w http.ResponseWriter, r *http.Request) { io.WriteString(w, "ok") })
	be.srv.Config.ConnState = func(c net.Conn, s http.ConnState) {
		switch s {
		case http.StateNew:
			opened.Add(1)
		case http.StateClosed:
			closed.Add(1)
		}
	}
	fake := clock.NewFake(time.Unix(1000, 0))
	f := newFront(t, Options{Clock: fake})
	f.p.SetRoute(routeTo("a", be))
	ep := (*f.p.apps.Load())["a"].eps["a-a"]
	idle := func() int {
		ep.pool.mu.Lock()
		defer ep.pool.mu.Unlock()
		return len(ep.pool.idle)
	}
	get := func() {
		t.Helper()
		if code, body, _ := f.get(t, "a.localhost", "/"); code != 200 || body != "ok" {
			t.Fatalf("got %d %q", code, body)
		}
		eventually(t, "the replica connection back in the pool", func() bool { return idle() == 1 })
	}

	get()
	fake.Advance(idleTimeout - time.Second)
	get()
	if n := opened.Load(); n != 1 {
		t.Fatalf("%d connections opened to the replica; want the one reused", n)
	}
	// Idle for idleTimeout since its last use: closed by the pool's timer.
	fake.Advance(idleTimeout)
	eventually(t, "the idle connection to close", func() bool { return idle() == 0 && closed.Load() == 1 })
	get()
	if n := opened.Load(); n != 2 {
		t.Fatalf("%d connections opened to the replica; want a new one after the expiry", n)
	}

	// One found expired by get before its timer ran is not used either.
	ep.pool.mu.Lock()
	ep.pool.idle[0].since = fake.Now().Add(-idleTimeout)
	ep.pool.mu.Unlock()
	get()
	if n := opened.Load(); n != 3 {
		t.Fatalf("%d connections opened to the replica; want a new one for the expired", n)
	}
}

// BenchmarkIdleCheck is the look at an idle replica connection before its
// reuse (bconn.alive): one non-blocking peek at the socket.
func BenchmarkIdleCheck(b *testing.B) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		b.Fatal(err)
	}
	defer l.Close()
	go func() {
		c, err := l.Accept()
		if err == nil {
			io.Copy(io.Discard, c)
			c.Close()
		}
	}()
	var p pool
	bc, err := p.get(context.Background(), l.Addr().String(), true)
	if err != nil {
		b.Fatal(err)
	}
	defer p.drop(bc)
	b.ReportAllocs()
	b.ResetTimer()
	for range b.N {
		if !bc.alive() {
			b.Fatal("a clean connection is not alive")
		}
	}
}

// The idle check tells a clean connection from one with bytes waiting and
// one the replica closed.
func TestIdleCheck(t *testing.T) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	var p pool
	bc, err := p.get(context.Background(), l.Addr().String(), true)
	if err != nil {
		t.Fatal(err)
	}
	defer p.drop(bc)
	c, err := l.Accept()
	if err != nil {
		t.Fatal(err)
	}
	if !bc.alive() {
		t.Fatal("a clean connection is not alive")
	}
	c.Write([]byte("H"))
	eventually(t, "the byte to be seen", func() bool { return !bc.alive() })
	if _, err := bc.br.ReadByte(); err != nil {
		t.Fatal(err)
	}
	if !bc.alive() {
		t.Fatal("a connection read clean is not alive")
	}
	c.Close()
	eventually(t, "the close to be seen", func() bool { return !bc.alive() })
}
