package proxy

import (
	"bufio"
	"context"
	"errors"
	"io"
	"log/slog"
	"net"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/shoal-run/shoal/internal/clock"
	"github.com/shoal-run/shoal/internal/route"
)

// tcpBackend is a replica of a TCP app: it greets each connection with its
// name and a newline, then echoes what it reads.
type tcpBackend struct {
	name  string
	addr  string
	mu    sync.Mutex
	open  int // connections open now
	conns map[net.Conn]bool
}

func newTCPBackend(t *testing.T, name string) *tcpBackend {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	b := &tcpBackend{name: name, addr: l.Addr().String(), conns: map[net.Conn]bool{}}
	var wg sync.WaitGroup
	t.Cleanup(func() {
		l.Close()
		b.mu.Lock()
		for c := range b.conns {
			c.Close()
		}
		b.mu.Unlock()
		wg.Wait()
	})
	go func() {
		for {
			c, err := l.Accept()
			if err != nil {
				return
			}
			wg.Add(1)
			b.mu.Lock()
			b.conns[c] = true
			b.open++
			b.mu.Unlock()
			go func() {
				defer wg.Done()
				defer func() {
					c.Close()
					b.mu.Lock()
					delete(b.conns, c)
					b.open--
					b.mu.Unlock()
				}()
				io.WriteString(c, name+"\n")
				io.Copy(c, c)
			}()
		}
	}()
	return b
}

func (b *tcpBackend) openConns() int {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.open
}

// tcpRoute is app's TCP route on port to the backends (revision 1).
func tcpRoute(app string, port int, bs ...*tcpBackend) route.Route {
	r := route.Route{App: app, TCPPort: port}
	for _, b := range bs {
		r.Endpoints = append(r.Endpoints, route.Endpoint{ID: app + "-" + b.name, Addr: b.addr, Revision: 1})
	}
	return r
}

// serveTCP runs p.ServeTCP for app on a loopback listener until the test
// ends and returns its address.
func serveTCP(t *testing.T, p *Proxy, app string) string {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	go p.ServeTCP(l, app)
	t.Cleanup(func() { l.Close() })
	return l.Addr().String()
}

func newTCPProxy(t *testing.T, o Options) *Proxy {
	t.Helper()
	if o.Logger == nil {
		o.Logger = slog.New(slog.NewTextHandler(io.Discard, nil))
	}
	p := New(o)
	t.Cleanup(func() { p.Close() })
	return p
}

// tcpClient is a connection through the proxy with its reader.
type tcpClient struct {
	net.Conn
	r *bufio.Reader
}

func dialTCPClient(t *testing.T, addr string) *tcpClient {
	t.Helper()
	c, err := net.DialTimeout("tcp", addr, 10*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	c.SetDeadline(time.Now().Add(30 * time.Second))
	return &tcpClient{Conn: c, r: bufio.NewReader(c)}
}

// line reads one line (without its newline) or fails the test.
func (c *tcpClient) line(t *testing.T) string {
	t.Helper()
	s, err := c.r.ReadString('\n')
	if err != nil {
		t.Fatalf("reading through the TCP route: %v (got %q)", err, s)
	}
	return strings.TrimSuffix(s, "\n")
}

func TestTCPRouteRelaysToLeastLoaded(t *testing.T) {
	reg := prometheus.NewRegistry()
	p := newTCPProxy(t, Options{Registerer: reg})
	a, b, c := newTCPBackend(t, "a"), newTCPBackend(t, "b"), newTCPBackend(t, "c")
	p.SetRoute(tcpRoute("db", 1, a, b, c))
	addr := serveTCP(t, p, "db")

	// Three connections at once go to three replicas: each goes to the
	// one with the fewest open.
	seen := map[string]bool{}
	var clients []*tcpClient
	for range 3 {
		cl := dialTCPClient(t, addr)
		seen[cl.line(t)] = true
		clients = append(clients, cl)
	}
	if len(seen) != 3 {
		t.Fatalf("three connections reached %v, want each replica once", seen)
	}
	// Bytes go through both ways, as they are.
	io.WriteString(clients[0], "SELECT 1;\n")
	if got := clients[0].line(t); got != "SELECT 1;" {
		t.Fatalf("echo through the route: %q", got)
	}
	st := p.Load("db")
	if st.InFlight != 3 || st.Requests != 3 {
		t.Fatalf("load with 3 connections open: %+v", st)
	}
	for id, el := range st.Endpoints {
		if el.InFlight != 1 {
			t.Fatalf("endpoint %s has %d connections in flight, want 1", id, el.InFlight)
		}
	}
	// A client's half close is passed on: the replica's echo ends, then
	// its side, and the connection's count.
	clients[1].Conn.(*net.TCPConn).CloseWrite()
	if _, err := io.ReadAll(clients[1].r); err != nil {
		t.Fatalf("after a half close: %v", err)
	}
	eventually(t, "the closed connection uncounted", func() bool { return p.Load("db").InFlight == 2 })
	if v := metricCount(t, reg, "shoal_proxy_requests_total", "200"); v != 1 {
		t.Fatalf("requests_total{code=200} = %v after one connection ended, want 1", v)
	}
}

// metricCount returns the value of the counter name with code label code
// for app db.
func metricCount(t *testing.T, g prometheus.Gatherer, name, code string) float64 {
	t.Helper()
	mfs, err := g.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, mf := range mfs {
		if mf.GetName() != name {
			continue
		}
		for _, m := range mf.GetMetric() {
			app, c := "", ""
			for _, l := range m.GetLabel() {
				switch l.GetName() {
				case "app":
					app = l.GetValue()
				case "code":
					c = l.GetValue()
				}
			}
			if app == "db" && c == code {
				return m.GetCounter().GetValue()
			}
		}
	}
	return 0
}

func TestTCPRouteActivatesAndHolds(t *testing.T) {
	fake := clock.NewFake(time.Unix(1000, 0))
	act := newActivator()
	p := newTCPProxy(t, Options{Activator: act, Clock: fake})
	p.SetRoute(route.Route{App: "db", TCPPort: 1})
	addr := serveTCP(t, p, "db")

	cl := dialTCPClient(t, addr)
	// A client that speaks first: its bytes wait with it.
	io.WriteString(cl, "hello\n")
	if app := recv(t, act.calls, "Activate"); app != "db" {
		t.Fatalf("Activate(%q)", app)
	}
	eventually(t, "the connection to queue", func() bool { return p.Load("db").Queued == 1 })
	p.SetRoute(tcpRoute("db", 1, newTCPBackend(t, "woke")))
	if got := cl.line(t); got != "woke" {
		t.Fatalf("greeting %q, want the woken replica's", got)
	}
	if got := cl.line(t); got != "hello" {
		t.Fatalf("the bytes sent while held came back as %q", got)
	}
	if st := p.Load("db"); st.Queued != 0 || st.InFlight != 1 {
		t.Fatalf("load after the wake-up: %+v", st)
	}
}

func TestTCPRouteQueueTimeout(t *testing.T) {
	fake := clock.NewFake(time.Unix(1000, 0))
	reg := prometheus.NewRegistry()
	p := newTCPProxy(t, Options{Activator: newActivator(), Clock: fake, Registerer: reg})
	p.SetRoute(route.Route{App: "db", TCPPort: 1, QueueTimeout: 5 * time.Second})
	addr := serveTCP(t, p, "db")
	cl := dialTCPClient(t, addr)
	eventually(t, "the connection to queue", func() bool { return p.Load("db").Queued == 1 })
	eventually(t, "the queue timer", func() bool { return fake.Timers() >= 1 })
	fake.Advance(5 * time.Second)
	if _, err := cl.r.ReadByte(); !errors.Is(err, io.EOF) {
		t.Fatalf("a held connection past the queue timeout: %v, want it closed (EOF)", err)
	}
	eventually(t, "the connection uncounted", func() bool { return p.Load("db").InFlight == 0 })
	if v := metricCount(t, reg, "shoal_proxy_requests_total", "503"); v != 1 {
		t.Fatalf("requests_total{code=503} = %v, want 1", v)
	}
}

func TestTCPRouteClientGoneWhileHeld(t *testing.T) {
	p := newTCPProxy(t, Options{Activator: newActivator()})
	p.SetRoute(route.Route{App: "db", TCPPort: 1})
	addr := serveTCP(t, p, "db")
	cl := dialTCPClient(t, addr)
	eventually(t, "the connection to queue", func() bool { return p.Load("db").Queued == 1 })
	cl.Close()
	eventually(t, "the gone client's connection to leave the queue", func() bool {
		st := p.Load("db")
		return st.Queued == 0 && st.InFlight == 0
	})
}

func TestTCPRouteDrainsAndCuts(t *testing.T) {
	p := newTCPProxy(t, Options{})
	a, b := newTCPBackend(t, "a"), newTCPBackend(t, "b")
	p.SetRoute(tcpRoute("db", 1, a))
	addr := serveTCP(t, p, "db")
	old := dialTCPClient(t, addr)
	if got := old.line(t); got != "a" {
		t.Fatalf("first connection reached %q", got)
	}
	// a leaves the route: new connections go to b, the open one goes on.
	p.SetRoute(tcpRoute("db", 1, b))
	if got := dialTCPClient(t, addr).line(t); got != "b" {
		t.Fatalf("a connection after a left the route reached %q, want b", got)
	}
	io.WriteString(old, "still\n")
	if got := old.line(t); got != "still" {
		t.Fatalf("the draining connection: %q", got)
	}
	// WaitIdle waits for it, then, at the end of the grace, cuts it.
	ctx, cancel := context.WithTimeout(context.Background(), 200*time.Millisecond)
	defer cancel()
	if err := p.WaitIdle(ctx, "db-a"); !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("WaitIdle with a connection open: %v", err)
	}
	if _, err := io.ReadAll(old.r); err != nil {
		t.Fatalf("the cut connection: %v, want EOF", err)
	}
	eventually(t, "the replica's side closed", func() bool { return a.openConns() == 0 })
	if err := p.Idle(context.Background(), "db-a"); err != nil {
		t.Fatal(err)
	}
}

func TestTCPRouteConnectFailsOver(t *testing.T) {
	p := newTCPProxy(t, Options{})
	b := newTCPBackend(t, "b")
	r := tcpRoute("db", 1, b)
	r.Endpoints = append([]route.Endpoint{{ID: "db-dead", Addr: deadAddr(t), Revision: 1}}, r.Endpoints...)
	p.SetRoute(r)
	addr := serveTCP(t, p, "db")
	for i := range 4 {
		if got := dialTCPClient(t, addr).line(t); got != "b" {
			t.Fatalf("connection %d reached %q, want b (the other refuses)", i, got)
		}
	}
}

func TestTCPRouteListensOnItsPort(t *testing.T) {
	p := newTCPProxy(t, Options{TCPHost: "127.0.0.1"})
	b := newTCPBackend(t, "b")
	port, _ := strconv.Atoi(strings.TrimPrefix(deadAddr(t), "127.0.0.1:"))
	p.SetRoute(tcpRoute("db", port, b))
	addr := p.TCPAddr("db")
	if addr == nil || addr.String() != "127.0.0.1:"+strconv.Itoa(port) {
		t.Fatalf("TCPAddr(db) = %v, want 127.0.0.1:%d", addr, port)
	}
	if got := dialTCPClient(t, addr.String()).line(t); got != "b" {
		t.Fatalf("through the route's port: %q", got)
	}
	// HTTP requests for the app are refused, naming its port.
	f := &front{p: p}
	f.addr = serveProxy(t, p)
	f.url, f.client = "http://"+f.addr, &http.Client{}
	code, body, _ := f.do(t, f.req(t, "GET", "db.localhost", "/", nil))
	if code != 404 || !strings.Contains(body, "takes TCP connections on port "+strconv.Itoa(port)) {
		t.Fatalf("HTTP to a TCP app: %d %s", code, body)
	}
	// The app removed, its port is closed.
	p.RemoveRoute("db")
	if p.TCPAddr("db") != nil {
		t.Fatal("TCPAddr after RemoveRoute")
	}
	if c, err := net.DialTimeout("tcp", addr.String(), 5*time.Second); err == nil {
		c.Close()
		t.Fatal("the removed app's port still takes connections")
	}
}

// A route whose port is outside the TCP ports the proxy was given is not
// listened for, whatever the daemon pushed (a record stored before the
// range was set).
func TestTCPRouteOutsideItsPortsNotBound(t *testing.T) {
	port, _ := strconv.Atoi(strings.TrimPrefix(deadAddr(t), "127.0.0.1:"))
	p := newTCPProxy(t, Options{TCPHost: "127.0.0.1", TCPPorts: route.PortRange{Lo: port + 1, Hi: port + 1}})
	p.SetRoute(tcpRoute("db", port, newTCPBackend(t, "b")))
	if addr := p.TCPAddr("db"); addr != nil {
		t.Fatalf("TCPAddr(db) = %v for a port outside the range", addr)
	}
	if c, err := net.DialTimeout("tcp", "127.0.0.1:"+strconv.Itoa(port), 5*time.Second); err == nil {
		c.Close()
		t.Fatal("a port outside the range takes connections")
	}
}

// A TCP connection whose local replica refuses is not relayed to another
// node's endpoint, which is that node's HTTP proxy.
func TestTCPRouteNeverFallsBackToAnotherNode(t *testing.T) {
	p := newTCPProxy(t, Options{})
	p.SetHop("n1", []byte("key"))
	far := newTCPBackend(t, "far")
	r := route.Route{App: "db", TCPPort: 1, Endpoints: []route.Endpoint{
		{ID: "db-dead", Addr: deadAddr(t), Revision: 1, Node: "n1"},
		{ID: "db-far", Addr: far.addr, Revision: 1, Node: "n2"},
	}}
	p.SetRoute(r)
	addr := serveTCP(t, p, "db")
	cl := dialTCPClient(t, addr)
	if b, err := io.ReadAll(cl.r); err != nil || len(b) > 0 {
		t.Fatalf("through a route with a dead local replica: %q, %v; want the connection closed", b, err)
	}
	if n := far.openConns(); n != 0 {
		t.Fatalf("the other node's endpoint has %d connections", n)
	}
}

// An app listening on its port keeps it when another app's route names
// the same port, whatever their names' order.
func TestTCPRouteListenerKeepsItsPort(t *testing.T) {
	p := newTCPProxy(t, Options{TCPHost: "127.0.0.1"})
	port, _ := strconv.Atoi(strings.TrimPrefix(deadAddr(t), "127.0.0.1:"))
	p.SetRoute(tcpRoute("zeta", port, newTCPBackend(t, "z")))
	if p.TCPAddr("zeta") == nil {
		t.Fatal("zeta does not listen")
	}
	p.SetRoute(tcpRoute("alpha", port, newTCPBackend(t, "a")))
	if p.TCPAddr("alpha") != nil || p.TCPAddr("zeta") == nil {
		t.Fatalf("after alpha asked for zeta's port: alpha %v, zeta %v", p.TCPAddr("alpha"), p.TCPAddr("zeta"))
	}
	if got := dialTCPClient(t, "127.0.0.1:"+strconv.Itoa(port)).line(t); got != "z" {
		t.Fatalf("through the port: %q, want zeta's replica", got)
	}
	// Once zeta is gone, alpha has it.
	p.RemoveRoute("zeta")
	if p.TCPAddr("alpha") == nil {
		t.Fatal("alpha does not listen after zeta left")
	}
}

// One client address holds at most Limits.MaxConnsPerClient connections
// through TCP routes too: one over it is closed at once.
func TestTCPRouteClientCap(t *testing.T) {
	p := newTCPProxy(t, Options{Limits: Limits{MaxConnsPerClient: 2}})
	p.SetRoute(tcpRoute("db", 1, newTCPBackend(t, "b")))
	addr := serveTCP(t, p, "db")
	first := dialTCPClient(t, addr)
	for _, c := range []*tcpClient{first, dialTCPClient(t, addr)} {
		if got := c.line(t); got != "b" {
			t.Fatalf("a connection under the cap: %q", got)
		}
	}
	if b, err := io.ReadAll(dialTCPClient(t, addr).r); err != nil || len(b) > 0 {
		t.Fatalf("a third connection: %q, %v; want it closed", b, err)
	}
	first.Close()
	eventually(t, "a connection taken again once one closed", func() bool {
		c, err := net.DialTimeout("tcp", addr, 5*time.Second)
		if err != nil {
			return false
		}
		defer c.Close()
		c.SetDeadline(time.Now().Add(5 * time.Second))
		s, _ := bufio.NewReader(c).ReadString('\n')
		return s == "b\n"
	})
}

// A TCP route that has no listener says why in its app's load: the port
// taken by another program (tried again until it is free) or by another
// app; and the load read since the change tells it.
func TestTCPRouteTellsWhyItDoesNotListen(t *testing.T) {
	fc := clock.NewFake(time.Unix(1_700_000_000, 0))
	p := newTCPProxy(t, Options{TCPHost: "127.0.0.1", Clock: fc})
	blocker, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer blocker.Close()
	port := blocker.Addr().(*net.TCPAddr).Port
	before := fc.Now()
	p.SetRoute(tcpRoute("db", port, newTCPBackend(t, "b")))
	l := p.Load("db")
	if l.TCP != "" || !strings.Contains(l.TCPError, "address already in use") {
		t.Fatalf("db's port held by another program: load says TCP %q, TCPError %q", l.TCP, l.TCPError)
	}
	if got := p.LoadsSince(before)["db"]; got.TCPError != l.TCPError {
		t.Fatalf("LoadsSince: db's TCPError %q, want %q", got.TCPError, l.TCPError)
	}
	// A second app asking for the same port is told whose it is.
	p.SetRoute(tcpRoute("zeta", port, newTCPBackend(t, "z")))
	if got := p.Load("zeta").TCPError; !strings.Contains(got, `app "db"'s`) {
		t.Fatalf("zeta, naming db's port: TCPError %q", got)
	}
	// The other program lets the port go: the next retry binds it.
	blocker.Close()
	fc.Advance(tcpRetry)
	deadline := time.Now().Add(30 * time.Second)
	for p.Load("db").TCP == "" {
		if time.Now().After(deadline) {
			t.Fatalf("db does not listen after the port was freed and %s passed: %+v", tcpRetry, p.Load("db"))
		}
		time.Sleep(10 * time.Millisecond)
	}
	if l := p.Load("db"); l.TCP != "127.0.0.1:"+strconv.Itoa(port) || l.TCPError != "" {
		t.Fatalf("db listening: TCP %q, TCPError %q", l.TCP, l.TCPError)
	}
	if got := dialTCPClient(t, "127.0.0.1:"+strconv.Itoa(port)).line(t); got != "b" {
		t.Fatalf("through db's port: %q", got)
	}
	if l := p.Loads()["db"]; l.TCP == "" {
		t.Fatalf("Loads: db %+v", l)
	}
}
