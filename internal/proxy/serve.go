package proxy

import (
	"bufio"
	"context"
	"crypto/tls"
	"errors"
	"net"
	"net/http"
	"sync"
	"sync/atomic"
	"time"
)

// Timeouts of the connections a Proxy accepts itself (Serve).
const (
	// HeaderTimeout bounds the arrival of a request head once its first
	// byte came.
	HeaderTimeout = 10 * time.Second
	// IdleTimeout closes a kept-alive client connection with no request.
	IdleTimeout = 2 * time.Minute
	// ioTimeout ends a client connection whose request body or answer
	// makes no progress for this long, so that a slow client does not hold
	// a replica's connection forever.
	ioTimeout = time.Minute
	// watchAfter is about how long a request waits for its replica's
	// answer before the client connection is watched for a hang-up (half
	// of it at least).
	watchAfter = 250 * time.Millisecond
)

// server is the state of the proxy's own HTTP/1.1 front end: the listeners
// it serves, the client connections it holds, and the net/http server that
// takes over connections whose requests the fast path does not handle.
type server struct {
	p        *Proxy
	ctx      context.Context
	cancel   context.CancelFunc
	shutting atomic.Bool

	mu        sync.Mutex
	listeners map[*net.Listener]struct{}
	conns     map[*cconn]struct{}
	perClient map[string]int // open connections by client address
	gone      chan struct{}  // closed and replaced when a connection ends during shutdown

	stdOnce sync.Once
	std     *http.Server
	handed  *handoffListener
	// h2 serves the connections that open with HTTP/2's preface (h2front.go).
	h2       *http.Server
	h2handed *handoffListener

	timeouts timeouts // set before Serve; shorter in tests
	limits   Limits
	// guardChecks counts the upload guards' checks, for tests.
	guardChecks atomic.Int64
}

// timeouts of the client connections.
type timeouts struct {
	header, idle, io time.Duration
}

func (f *server) init(p *Proxy, l Limits) {
	f.p = p
	f.limits = l
	f.ctx, f.cancel = context.WithCancel(context.Background())
	f.listeners = map[*net.Listener]struct{}{}
	f.conns = map[*cconn]struct{}{}
	f.gone = make(chan struct{})
	f.timeouts = timeouts{header: HeaderTimeout, idle: IdleTimeout, io: ioTimeout}
	f.handed = &handoffListener{conns: make(chan net.Conn), done: make(chan struct{})}
	f.std = &http.Server{
		Handler:           p,
		ReadHeaderTimeout: HeaderTimeout,
		IdleTimeout:       IdleTimeout,
		MaxHeaderBytes:    l.MaxHeadBytes,
		ConnContext:       connContext,
		ErrorLog:          mistakeLogger(p),
	}
	f.initH2()
}

// Serve accepts HTTP/1.1 connections on l and answers their requests until
// Shutdown or Close, then returns http.ErrServerClosed. Plain requests take
// the proxy's own fast path; a connection whose request it does not handle
// (an upgrade, Expect, a chunked upload, HTTP/1.0, an absolute URI, a head
// over 8 KiB, anything malformed) is handed, with the bytes already read,
// to a net/http server that runs the same handler for the rest of its life.
func (p *Proxy) Serve(l net.Listener) error { return p.serve(l, false) }

// serve accepts connections on l, TLS ones when isTLS (see ServeTLS).
func (p *Proxy) serve(l net.Listener, isTLS bool) error {
	f := &p.front
	f.mu.Lock()
	if f.shutting.Load() {
		f.mu.Unlock()
		return http.ErrServerClosed
	}
	f.listeners[&l] = struct{}{}
	f.mu.Unlock()
	defer func() {
		f.mu.Lock()
		delete(f.listeners, &l)
		f.mu.Unlock()
	}()
	f.stdOnce.Do(func() {
		go f.std.Serve(f.handed)
		go f.h2.Serve(f.h2handed)
	})
	var delay time.Duration
	for {
		c, err := l.Accept()
		if err != nil {
			if f.shutting.Load() {
				return http.ErrServerClosed
			}
			if errors.Is(err, net.ErrClosed) {
				return err
			}
			// Out of descriptors and the like: wait and go on; out of
			// descriptors, idle connections of the heaviest client go.
			delay = min(max(2*delay, 5*time.Millisecond), time.Second)
			shed := 0
			if outOfFiles(err) {
				shed = f.shed()
			}
			p.clientMistake("proxy: accept failed", "err", err, "retry_in", delay, "idle_closed", shed)
			time.Sleep(delay)
			continue
		}
		delay = 0
		if isTLS {
			c = tls.Server(c, p.edge.config.Load())
		}
		cc := f.add(c)
		if cc == nil {
			c.Close()
			continue
		}
		go cc.serve()
	}
}

// Shutdown stops accepting, closes idle client connections, and waits for
// the requests in flight to be answered (their connections are then
// closed), or for ctx to end.
func (p *Proxy) Shutdown(ctx context.Context) error {
	p.closeTCP()
	f := &p.front
	f.mu.Lock()
	f.shutting.Store(true)
	f.closeListenersLocked()
	f.mu.Unlock()
	stdErr := make(chan error, 2)
	go func() { stdErr <- f.std.Shutdown(ctx) }()
	go func() { stdErr <- f.h2.Shutdown(ctx) }()
	for {
		f.mu.Lock()
		for c := range f.conns {
			if c.state.CompareAndSwap(stateIdle, stateClosed) {
				c.c.Close()
			}
		}
		n, gone := len(f.conns), f.gone
		f.mu.Unlock()
		if n == 0 {
			break
		}
		select {
		case <-gone:
		case <-ctx.Done():
			return ctx.Err()
		}
	}
	f.cancel()
	return errors.Join(<-stdErr, <-stdErr)
}

// Close stops accepting and closes every client connection at once.
func (p *Proxy) Close() error {
	f := &p.front
	f.mu.Lock()
	f.shutting.Store(true)
	f.closeListenersLocked()
	for c := range f.conns {
		c.state.Store(stateClosed)
		c.c.Close()
	}
	f.mu.Unlock()
	f.cancel()
	p.closeTCP()
	p.cutTCP()
	return errors.Join(f.std.Close(), f.h2.Close())
}

func (f *server) closeListenersLocked() {
	for l := range f.listeners {
		(*l).Close()
	}
	f.handed.Close()
	f.h2handed.Close()
}

// add tracks a new client connection; nil once shutting down or when its
// client is at its connection cap.
func (f *server) add(c net.Conn) *cconn {
	client := clientAddr(c)
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.shutting.Load() || !f.admitConnLocked(client) {
		return nil
	}
	cc := newCconn(f, c, client)
	f.conns[cc] = struct{}{}
	return cc
}

// remove forgets a client connection that ended or was handed off.
func (f *server) remove(c *cconn) {
	f.mu.Lock()
	delete(f.conns, c)
	if f.shutting.Load() {
		close(f.gone)
		f.gone = make(chan struct{})
	}
	f.mu.Unlock()
}

// handoffListener gives connections to the fallback net/http server.
type handoffListener struct {
	conns chan net.Conn
	done  chan struct{}
	once  sync.Once
}

func (l *handoffListener) Accept() (net.Conn, error) {
	select {
	case c := <-l.conns:
		return c, nil
	case <-l.done:
		return nil, net.ErrClosed
	}
}

func (l *handoffListener) Close() error {
	l.once.Do(func() { close(l.done) })
	return nil
}

func (l *handoffListener) Addr() net.Addr { return handoffAddr{} }

// give hands c over; false once the listener is closed.
func (l *handoffListener) give(c net.Conn) bool {
	select {
	case l.conns <- c:
		return true
	case <-l.done:
		return false
	}
}

type handoffAddr struct{}

func (handoffAddr) Network() string { return "handoff" }
func (handoffAddr) String() string  { return "handoff" }

// handedConn is a client connection given to net/http together with the
// bytes the fast path had already read from it: a long head (pre), then
// what its read buffer holds.
type handedConn struct {
	net.Conn
	mu   sync.Mutex
	pre  []byte
	br   *bufio.Reader
	io   time.Duration // bounds each write
	gone *countedConn
}

func (h *handedConn) Close() error {
	err := h.Conn.Close()
	h.gone.closed()
	return err
}

// Write bounds every write to the client, so that a client that does not
// read does not hold its request (and its replica) for ever.
func (h *handedConn) Write(b []byte) (int, error) {
	h.Conn.SetWriteDeadline(time.Now().Add(h.io))
	return h.Conn.Write(b)
}

func (h *handedConn) Read(b []byte) (int, error) {
	h.mu.Lock()
	if len(h.pre) > 0 {
		n := copy(b, h.pre)
		h.pre = h.pre[n:]
		if len(h.pre) == 0 {
			h.pre = nil
		}
		h.mu.Unlock()
		return n, nil
	}
	if br := h.br; br != nil {
		if br.Buffered() > 0 {
			n, err := br.Read(b)
			h.mu.Unlock()
			return n, err
		}
		h.br = nil
		putReader(br)
	}
	h.mu.Unlock()
	return h.Conn.Read(b)
}
