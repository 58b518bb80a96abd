package proxy

import (
	"context"
	"errors"
	"fmt"
	"io"
	"maps"
	"net"
	"net/http"
	"strconv"
	"sync"
	"time"

	"github.com/shoal-run/shoal/internal/clock"
	"github.com/shoal-run/shoal/internal/route"
)

// TCP routes: an app whose route has a TCPPort (shoal.toml's protocol =
// "tcp" and listen) takes connections on that port of Options.TCPHost, and
// each one is relayed as it is to one of the app's endpoints on this node,
// the one with the fewest connections open. The rules are the HTTP
// routes': a connection is counted in flight on its app and endpoint for
// its whole life (so it keeps its replica from freeze and scale-in); one
// that finds no endpoint wakes the app and is held in its queue (its
// limit and timeout); an endpoint that left the route takes no new
// connection, WaitIdle sees the open ones end and Cut closes them; the
// metrics count each connection as a request, 200 once relayed, 502 when
// no replica accepted it, 503 when none was ready in time.

// tcpFront holds the listeners of the TCP routes, by port.
type tcpFront struct {
	host  string          // where TCP routes listen; "" when none may
	ports route.PortRange // the ports they may listen on
	mu    sync.Mutex
	ls    map[int]*tcpListener
	// failed is, by app, why its route's port has no listener of its own
	// (logged once, not at every route change; told in the app's load).
	failed map[string]string
	// changed is when (unix nanoseconds) a listener came or went or a
	// failure changed, so that LoadsSince tells the apps concerned.
	changed int64
	// retry runs syncTCP again while a port could not be bound: the
	// program holding it may let it go.
	retry  clock.Timer
	closed bool
}

// tcpRetry is how often a TCP route's port that could not be bound is
// tried again.
const tcpRetry = 5 * time.Second

type tcpListener struct {
	app string
	ln  net.Listener
}

// syncTCP makes the TCP listeners follow the table: one per port a route
// names (should two apps name one, the app listening keeps it while its
// route names it; else the first by name has it), none for ports no route
// names any more. Called after every change of the table.
func (p *Proxy) syncTCP() {
	f := &p.tcp
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.closed {
		return
	}
	want := map[int]string{}
	for name, a := range *p.apps.Load() {
		rt := a.route.Load()
		if rt == nil || rt.tcpPort == 0 {
			continue
		}
		port := rt.tcpPort
		if l := f.ls[port]; l != nil && l.app == name {
			want[port] = name
			continue
		}
		if other, ok := want[port]; !ok || (name < other && !(f.ls[port] != nil && f.ls[port].app == other)) {
			want[port] = name
		}
	}
	for port, l := range f.ls {
		if want[port] != l.app {
			l.ln.Close()
			delete(f.ls, port)
			f.changed = p.table.clock.Now().UnixNano()
		}
	}
	failed := map[string]string{}
	for name, a := range *p.apps.Load() {
		rt := a.route.Load()
		if rt == nil || rt.tcpPort == 0 {
			continue
		}
		if owner := want[rt.tcpPort]; owner != name {
			failed[name] = fmt.Sprintf("port %d is app %q's", rt.tcpPort, owner)
		}
	}
	for port, name := range want {
		if f.ls[port] != nil {
			continue
		}
		if f.host == "" {
			failed[name] = "the proxy has no address for TCP routes"
			continue
		}
		if !f.ports.Contains(port) {
			// A route stored before the range was set, or a daemon that
			// did not check it: never bind outside what the operator allowed.
			failed[name] = fmt.Sprintf("port %d is outside the TCP ports allowed (%s, the daemon's --proxy-tcp-ports)", port, f.ports)
			continue
		}
		ln, err := net.Listen("tcp", net.JoinHostPort(f.host, strconv.Itoa(port)))
		if err != nil {
			failed[name] = err.Error()
			continue
		}
		f.changed = p.table.clock.Now().UnixNano()
		if f.ls == nil {
			f.ls = map[int]*tcpListener{}
		}
		f.ls[port] = &tcpListener{app: name, ln: ln}
		p.log.Info("proxy: TCP route listening", "app", name, "addr", ln.Addr().String())
		go p.ServeTCP(ln, name)
	}
	for name, why := range failed {
		if f.failed[name] != why {
			p.log.Error("proxy: TCP route cannot listen", "app", name, "err", why)
		}
	}
	if !maps.Equal(failed, f.failed) {
		f.changed = p.table.clock.Now().UnixNano()
	}
	f.failed = failed
	if len(failed) > 0 && f.retry == nil {
		f.retry = p.table.clock.AfterFunc(tcpRetry, func() {
			f.mu.Lock()
			f.retry = nil
			f.mu.Unlock()
			p.syncTCP()
		})
	}
}

// tcpStatus tells app's TCP route: the address it listens on, or why it
// has no listener ("" and "" for an app without one).
func (p *Proxy) tcpStatus(app string) (addr, failure string) {
	f := &p.tcp
	f.mu.Lock()
	defer f.mu.Unlock()
	for _, l := range f.ls {
		if l.app == app {
			return l.ln.Addr().String(), ""
		}
	}
	return "", f.failed[app]
}

// tcpChangedSince reports whether a TCP listener came or went, or a
// failure to listen changed, at or after s (unix nanoseconds).
func (p *Proxy) tcpChangedSince(s int64) bool {
	f := &p.tcp
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.changed >= s
}

// Load returns app's counters, with its TCP route's listener.
func (p *Proxy) Load(app string) route.Load {
	l := p.table.Load(app)
	l.TCP, l.TCPError = p.tcpStatus(app)
	return l
}

// Loads returns every app's counters (table.Loads), with their TCP
// routes' listeners.
func (p *Proxy) Loads() map[string]route.Load {
	out := p.table.Loads()
	p.withTCP(out)
	return out
}

// LoadsSince is table.LoadsSince, with the TCP routes' listeners, and
// every app of the table when one of those changed since.
func (p *Proxy) LoadsSince(since time.Time) map[string]route.Load {
	if p.tcpChangedSince(since.UnixNano()) {
		return p.Loads()
	}
	out := p.table.LoadsSince(since)
	p.withTCP(out)
	return out
}

func (p *Proxy) withTCP(loads map[string]route.Load) {
	for name, l := range loads {
		if addr, why := p.tcpStatus(name); addr != "" || why != "" {
			l.TCP, l.TCPError = addr, why
			loads[name] = l
		}
	}
}

// TCPAddr returns the address app's TCP route listens on, or nil.
func (p *Proxy) TCPAddr(app string) net.Addr {
	f := &p.tcp
	f.mu.Lock()
	defer f.mu.Unlock()
	for _, l := range f.ls {
		if l.app == app {
			return l.ln.Addr()
		}
	}
	return nil
}

// closeTCP closes the TCP routes' listeners for good.
func (p *Proxy) closeTCP() {
	f := &p.tcp
	f.mu.Lock()
	defer f.mu.Unlock()
	f.closed = true
	if f.retry != nil {
		f.retry.Stop()
	}
	for port, l := range f.ls {
		l.ln.Close()
		delete(f.ls, port)
	}
}

// ServeTCP relays the connections l accepts to app's endpoints until l is
// closed. The proxy calls it for each TCP route it listens for; a test
// may hand it a listener of its own.
func (p *Proxy) ServeTCP(l net.Listener, app string) error {
	var delay time.Duration
	for {
		c, err := l.Accept()
		if err != nil {
			if errors.Is(err, net.ErrClosed) {
				return err
			}
			// Out of descriptors or a like passing trouble: wait and go on.
			delay = min(max(2*delay, 5*time.Millisecond), time.Second)
			p.log.Warn("proxy: TCP accept failed", "app", app, "err", err, "retry_in", delay)
			time.Sleep(delay)
			continue
		}
		delay = 0
		// One client's connections count against its cap
		// (Limits.MaxConnsPerClient) with its HTTP ones.
		client := clientAddr(c)
		p.front.mu.Lock()
		ok := p.front.admitConnLocked(client)
		p.front.mu.Unlock()
		if !ok {
			c.Close()
			continue
		}
		go func() {
			defer p.front.connGone(client)
			p.serveTCPConn(c, app)
		}()
	}
}

// serveTCPConn relays one client connection of app to a replica.
func (p *Proxy) serveTCPConn(c net.Conn, name string) {
	defer c.Close()
	a := (*p.apps.Load())[name]
	if a == nil {
		return
	}
	rt := a.route.Load()
	if rt == nil || rt.tcpPort == 0 {
		return
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	st := &reqState{Context: ctx, app: a, start: p.clock.Now()}
	a.requests.Add(1)
	a.inFlight.Add(1)
	a.last.Store(st.start.UnixNano())
	defer func() {
		now := p.clock.Now()
		a.inFlight.Add(-1)
		a.last.Store(now.UnixNano())
		a.observe(st.code, now.Sub(st.start), st)
	}()
	if rt.unavailable != "" {
		st.code = http.StatusServiceUnavailable
		return
	}
	var early []byte
	ep := a.pick(nil)
	if ep == nil {
		st.tier = tierCold
		if rt.frozen > 0 {
			st.tier = tierFrozen
		}
		var err error
		ep, early, err = p.holdTCP(st, c, a)
		st.held = p.clock.Since(st.start)
		if err != nil {
			var ue *unavailableError
			switch {
			case errors.As(err, &ue):
				st.code = http.StatusServiceUnavailable
				p.log.Warn("proxy: TCP connection refused", "app", name, "err", err)
			case errors.Is(err, errRemoved):
				st.code = http.StatusNotFound
			default:
				st.code = statusClientGone
			}
			return
		}
	}
	// A failed connect goes to each other endpoint once, as an HTTP
	// request's does (nothing was sent).
	var rc net.Conn
	for {
		var err error
		rc, err = p.dialTCP(ctx, ep.addr)
		if err == nil {
			break
		}
		p.log.Warn("proxy: TCP connect to replica failed", "app", name, "endpoint", ep.id, "err", err)
		ep.release(p.clock.Now())
		st.tried = append(st.tried, ep)
		if ep = a.pick(st.tried); ep == nil {
			st.code = http.StatusBadGateway
			return
		}
	}
	st.ep = ep
	st.sent = p.clock.Now()
	st.head = st.sent
	st.code = http.StatusOK
	defer func() { ep.release(p.clock.Now()) }()
	if !ep.tcp.add(rc) {
		// Cut while connecting: the endpoint's grace is over.
		rc.Close()
		return
	}
	defer ep.tcp.remove(rc)
	if len(early) > 0 {
		if _, err := rc.Write(early); err != nil {
			rc.Close()
			return
		}
	}
	relayTCP(c, rc)
}

// dialTCP connects to a replica within DialTimeout.
func (p *Proxy) dialTCP(ctx context.Context, addr string) (net.Conn, error) {
	ctx, cancel := context.WithTimeout(ctx, DialTimeout)
	defer cancel()
	if p.dial != nil {
		return p.dial(ctx, "tcp", addr)
	}
	return dialer.DialContext(ctx, "tcp", addr)
}

// holdTCP waits, in app a's queue, for an endpoint for the connection c
// (see wait). Meanwhile it reads what the client sends (returned, for the
// replica) so that a client that goes away ends the wait.
func (p *Proxy) holdTCP(st *reqState, c net.Conn, a *app) (*endpoint, []byte, error) {
	ctx, cancel := context.WithCancel(st.Context)
	defer cancel()
	var early []byte
	read := make(chan struct{})
	go func() {
		defer close(read)
		buf := make([]byte, 4096)
		for len(early) < 64<<10 {
			n, err := c.Read(buf)
			early = append(early, buf[:n]...)
			if err != nil {
				var ne net.Error
				if !errors.As(err, &ne) || !ne.Timeout() {
					cancel() // the client went away
				}
				return
			}
		}
	}()
	ep, err := p.wait(ctx, a)
	// Stop the reader: a deadline in the past ends its Read.
	c.SetReadDeadline(time.Unix(1, 0))
	<-read
	c.SetReadDeadline(time.Time{})
	if err == nil && ctx.Err() != nil {
		// The client went away as the endpoint came.
		ep.release(p.clock.Now())
		return nil, nil, context.Canceled
	}
	return ep, early, err
}

// relayTCP copies both ways until both directions ended: a direction's
// end (EOF) is passed on as a half close, an error closes both.
func relayTCP(c, rc net.Conn) {
	done := make(chan struct{}, 2)
	pipe := func(dst, src net.Conn) {
		_, err := io.Copy(dst, src)
		if cw, ok := dst.(interface{ CloseWrite() error }); ok && err == nil {
			cw.CloseWrite()
		} else {
			dst.Close()
			src.Close()
		}
		done <- struct{}{}
	}
	go pipe(rc, c)
	go pipe(c, rc)
	<-done
	<-done
	rc.Close()
}

// tcpConns are the relayed connections to one endpoint, which Cut closes.
type tcpConns struct {
	mu    sync.Mutex
	conns map[net.Conn]struct{}
	cut   bool // cut and not routed again since: no new connection
}

// add tracks c; false once the endpoint was cut.
func (t *tcpConns) add(c net.Conn) bool {
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.cut {
		return false
	}
	if t.conns == nil {
		t.conns = map[net.Conn]struct{}{}
	}
	t.conns[c] = struct{}{}
	return true
}

func (t *tcpConns) remove(c net.Conn) {
	t.mu.Lock()
	delete(t.conns, c)
	t.mu.Unlock()
}

// open lets new connections in again (the endpoint is routed again).
func (t *tcpConns) open() {
	t.mu.Lock()
	t.cut = false
	t.mu.Unlock()
}

// cutAll closes every tracked connection and takes no new one until
// open; it returns how many it closed.
func (t *tcpConns) cutAll() int {
	t.mu.Lock()
	conns := t.conns
	t.conns, t.cut = nil, true
	t.mu.Unlock()
	for c := range conns {
		c.Close()
	}
	return len(conns)
}

// cutTCP closes every relayed TCP connection (the proxy is closing).
func (p *Proxy) cutTCP() {
	p.mu.Lock()
	eps := make([]*endpoint, 0, len(p.endpoints))
	for _, e := range p.endpoints {
		eps = append(eps, e)
	}
	p.mu.Unlock()
	for _, e := range eps {
		e.tcp.cutAll()
	}
}
