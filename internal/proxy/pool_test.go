package proxy

import (
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/shoal-run/shoal/internal/clock"
)

// countingBackend is a replica that counts the connections opened to it
// and closed, its ConnState hook set before it serves.
func countingBackend(t *testing.T, h http.HandlerFunc) (b *backend, opened, closed *atomic.Int64) {
	t.Helper()
	opened, closed = new(atomic.Int64), new(atomic.Int64)
	b = &backend{}
	b.srv = httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		b.hits.Add(1)
		h(w, r)
	}))
	b.srv.Config.ConnState = func(c net.Conn, s http.ConnState) {
		switch s {
		case http.StateNew:
			opened.Add(1)
		case http.StateClosed:
			closed.Add(1)
		}
	}
	b.srv.Start()
	t.Cleanup(b.srv.Close)
	b.addr = strings.TrimPrefix(b.srv.URL, "http://")
	return b, opened, closed
}

// An idle replica connection is reused while it is young and closed once
// it was idle for idleTimeout, whether or not a request comes.
func TestIdleReplicaConnectionsExpire(t *testing.T) {
	be, opened, closed := countingBackend(t, func(w http.ResponseWriter, r *http.Request) { io.WriteString(w, "ok") })
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

// A replica that says how long it keeps an idle connection (Keep-Alive:
// timeout=N, as Apache does) has it closed by the proxy a second before,
// and not reused after, whichever engine reads its answer: the fast path
// and net/http's leg (HTTP/1.0).
func TestReplicaKeepAliveTimeout(t *testing.T) {
	be, opened, closed := countingBackend(t, func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Keep-Alive", "timeout=3, max=100")
		io.WriteString(w, "ok")
	})
	fake := clock.NewFake(time.Unix(1000, 0))
	f := newFront(t, Options{Clock: fake})
	f.p.SetRoute(routeTo("a", be))
	ep := (*f.p.apps.Load())["a"].eps["a-a"]
	idle := func() int {
		ep.pool.mu.Lock()
		defer ep.pool.mu.Unlock()
		return len(ep.pool.idle)
	}
	for _, engine := range []string{"fast", "net/http"} {
		get := func() {
			t.Helper()
			f.getOK(t, engine)
			eventually(t, "the replica connection back in the pool", func() bool { return idle() == 1 })
		}
		n := opened.Load()
		get()
		fake.Advance(1500 * time.Millisecond)
		get()
		if got := opened.Load() - n; got != 1 {
			t.Fatalf("%s: %d connections opened; want the one reused within the replica's timeout", engine, got)
		}
		// Idle for 2s: closed by the pool, a second before the replica would.
		c := closed.Load()
		fake.Advance(2 * time.Second)
		eventually(t, "the idle connection to close", func() bool { return idle() == 0 && closed.Load() == c+1 })
		get()
		if got := opened.Load() - n; got != 2 {
			t.Fatalf("%s: %d connections opened; want a new one after the replica's timeout", engine, got)
		}
		fake.Advance(time.Minute) // the next engine starts with none
		eventually(t, "the idle connection to close", func() bool { return idle() == 0 })
	}
}

// At most maxConnsPerEndpoint connections to a replica carry requests at
// once, or the route's MaxConns (an app's [scale] max_connections), fewer
// or more; more requests wait in the proxy for one of them and are all
// answered, on either engine.
func TestReplicaConnectionsBounded(t *testing.T) {
	for _, c := range []struct{ maxConns, bound int }{{0, 32}, {4, 4}, {64, 64}} {
		t.Run(fmt.Sprintf("max_connections %d", c.maxConns), func(t *testing.T) {
			testReplicaConnectionsBounded(t, c.maxConns, c.bound)
		})
	}
}

func testReplicaConnectionsBounded(t *testing.T, maxConns, bound int) {
	release := make(chan struct{})
	var once sync.Once
	let := func() { once.Do(func() { close(release) }) }
	be, opened, _ := countingBackend(t, func(w http.ResponseWriter, r *http.Request) {
		<-release
		io.WriteString(w, "ok")
	})
	t.Cleanup(let) // before the replica's Close, which waits for its handlers
	f := newFront(t, Options{})
	rt := routeTo("a", be)
	rt.MaxConns = maxConns
	f.p.SetRoute(rt)
	n := bound + 16
	var wg sync.WaitGroup
	errs := make(chan error, n)
	for i := range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			c, err := net.Dial("tcp", f.addr)
			if err != nil {
				errs <- err
				return
			}
			defer c.Close()
			version := "1.1"
			if i%2 == 1 {
				version = "1.0" // net/http's leg
			}
			fmt.Fprintf(c, "GET /%d HTTP/%s\r\nHost: a.localhost\r\nConnection: close\r\n\r\n", i, version)
			b, err := io.ReadAll(c)
			if err != nil || !strings.HasPrefix(string(b), "HTTP/1.") || !strings.HasSuffix(string(b), "ok") {
				errs <- fmt.Errorf("request %d: %v %q", i, err, b)
			}
		}()
	}
	eventually(t, "the replica to hold requests on the bounded connections", func() bool { return be.hits.Load() >= int64(bound) })
	let()
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Error(err)
	}
	if got := opened.Load(); got > int64(bound) {
		t.Fatalf("%d connections opened to the replica for %d requests; want at most %d", got, n, bound)
	}
}

// testListener accepts connections for a pool's dials and counts them.
func testListener(t *testing.T) (addr string, accepted *atomic.Int64) {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { l.Close() })
	accepted = new(atomic.Int64)
	go func() {
		for {
			c, err := l.Accept()
			if err != nil {
				return
			}
			accepted.Add(1)
			t.Cleanup(func() { c.Close() })
		}
	}()
	return l.Addr().String(), accepted
}

// The pool bounded to max connections: a request beyond it waits; waiters
// get, first come first served, a connection put back (reused, not a new
// one) or the slot of one dropped (a new dial); the connection that comes
// back idle is the one taken next, and one idle past its replica's
// Keep-Alive timeout (less keepAliveMargin) is not.
func TestPoolBoundedFIFO(t *testing.T) {
	addr, accepted := testListener(t)
	fake := clock.NewFake(time.Unix(1000, 0))
	p := &pool{clock: fake, max: 2}
	t.Cleanup(func() { p.cutAll() })
	ctx := context.Background()
	a, err := p.get(ctx, addr, false)
	if err != nil {
		t.Fatal(err)
	}
	b, err := p.get(ctx, addr, false)
	if err != nil {
		t.Fatal(err)
	}
	waiters := func() int {
		p.mu.Lock()
		defer p.mu.Unlock()
		return len(p.waiters)
	}
	got := make([]chan *bconn, 3)
	for i := range got {
		got[i] = make(chan *bconn, 1)
		go func() {
			bc, err := p.get(ctx, addr, false)
			if err != nil {
				t.Error(err)
			}
			got[i] <- bc
		}()
		eventually(t, "the request to wait", func() bool { return waiters() == i+1 })
	}
	// A waiter whose request ends leaves the line.
	cctx, cancel := context.WithCancel(ctx)
	gone := make(chan error, 1)
	go func() {
		_, err := p.get(cctx, addr, false)
		gone <- err
	}()
	eventually(t, "the fourth request to wait", func() bool { return waiters() == 4 })
	cancel()
	if err := recv(t, gone, "the ended wait"); err != context.Canceled {
		t.Fatalf("an ended wait: %v", err)
	}

	p.put(a)
	if bc := recv(t, got[0], "the first waiter"); bc != a || !bc.reused {
		t.Fatalf("the first waiter got %p (reused %v), want the connection put back %p", bc, bc.reused, a)
	}
	p.drop(b)
	c := recv(t, got[1], "the second waiter")
	if c == a || c == b || c.reused {
		t.Fatal("the second waiter did not get a new connection for the slot dropped")
	}
	eventually(t, "the third connection accepted", func() bool { return accepted.Load() == 3 })
	select {
	case <-got[2]:
		t.Fatal("the third waiter got a connection beyond the bound")
	default:
	}
	p.put(c)
	d := recv(t, got[2], "the third waiter")
	if d != c {
		t.Fatal("the third waiter did not get the connection put back")
	}

	// Idle, most recently used first; one the replica keeps for 3s is
	// not taken after 2s.
	a.ka = 3 * time.Second
	p.put(d)
	fake.Advance(time.Second)
	p.put(a)
	if bc, _ := p.get(ctx, addr, false); bc != a {
		t.Fatal("the connection idle the shortest is not taken first")
	}
	p.put(a)
	fake.Advance(2 * time.Second)
	if bc, _ := p.get(ctx, addr, false); bc != d {
		t.Fatal("a connection idle past its replica's Keep-Alive timeout was taken")
	}
	if n := accepted.Load(); n != 3 {
		t.Fatalf("%d connections dialed, want 3", n)
	}
}

// keepAliveTimeout reads timeout=N wherever it is in Keep-Alive values.
func TestKeepAliveTimeout(t *testing.T) {
	for v, want := range map[string]time.Duration{
		"timeout=5, max=100":   5 * time.Second,
		"max=99, Timeout=15":   15 * time.Second,
		"timeout = 5":          0,
		"timeout=":             0,
		"max=3":                0,
		"":                     0,
		"timeout=x, timeout=2": 2 * time.Second,
	} {
		if got := keepAliveTimeout(v); got != want {
			t.Errorf("%q: %v, want %v", v, got, want)
		}
		if got := keepAliveTimeout([]byte(v)); got != want {
			t.Errorf("%q as bytes: %v, want %v", v, got, want)
		}
	}
}

// A replica connection whose last request's read deadline (the fast
// path's, a quarter of a second or so after it was sent; or the watcher's,
// set when its client left after the whole answer) passed while it was idle
// is reused, not taken for closed and replaced with a new one.
func TestIdleConnectionPastDeadlineReused(t *testing.T) {
	be, opened, _ := countingBackend(t, func(w http.ResponseWriter, r *http.Request) { io.WriteString(w, "ok") })
	f := newFront(t, Options{})
	f.p.SetRoute(routeTo("a", be))
	ep := (*f.p.apps.Load())["a"].eps["a-a"]
	for _, engine := range []string{"fast", "net/http", "fast"} {
		f.getOK(t, engine)
		var bc *bconn
		eventually(t, "the replica connection back in the pool", func() bool {
			ep.pool.mu.Lock()
			defer ep.pool.mu.Unlock()
			if len(ep.pool.idle) == 1 {
				bc = ep.pool.idle[0]
			}
			return bc != nil
		})
		bc.c.SetReadDeadline(time.Now().Add(-time.Second))
	}
	if n := opened.Load(); n != 1 {
		t.Fatalf("%d connections opened to the replica; want the one reused", n)
	}
}

// getOK asks app a for / through one engine: "fast" (an HTTP/1.1 request,
// the fast path) or "net/http" (an HTTP/1.0 one, the net/http leg), and
// wants 200 "ok".
func (f *front) getOK(t *testing.T, engine string) {
	t.Helper()
	if engine == "fast" {
		if code, body, _ := f.get(t, "a.localhost", "/"); code != 200 || body != "ok" {
			t.Fatalf("%s: got %d %q", engine, code, body)
		}
		return
	}
	rc := f.dial(t)
	rc.send("GET / HTTP/1.0\r\nHost: a.localhost\r\n\r\n")
	if resp, body := rc.read("GET"); resp.StatusCode != 200 || body != "ok" {
		t.Fatalf("%s: got %d %q", engine, resp.StatusCode, body)
	}
}
