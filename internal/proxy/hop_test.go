package proxy

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/shoal-run/shoal/internal/clock"
	"github.com/shoal-run/shoal/internal/route"
)

var testHopKey = []byte("the cluster's secret")

// hopFor is the hop header to endpoint id of node for a request to host at
// unix time now, made with testHopKey.
func hopFor(id, node, host string, now int64) string {
	return (&hopConf{key: testHopKey}).header(id, node, host, now)
}

// pair is two nodes' proxies, n1 and n2, of one cluster: app "a" has a
// replica on n2 only (b2, which records the headers it got).
type pair struct {
	n1, n2 *front
	b2     *backend
	mu     sync.Mutex
	seen   []http.Header
}

func newPair(t *testing.T) *pair { return newPairOn(t, nil) }

// newPairOn is newPair with both proxies on clock c (the real one when
// nil).
func newPairOn(t *testing.T, c clock.Clock) *pair {
	pr := &pair{n1: newFront(t, Options{Clock: c}), n2: newFront(t, Options{Clock: c})}
	pr.n1.p.SetHop("n1", testHopKey)
	pr.n2.p.SetHop("n2", testHopKey)
	pr.b2 = newBackend(t, func(w http.ResponseWriter, r *http.Request) {
		pr.mu.Lock()
		pr.seen = append(pr.seen, r.Header.Clone())
		pr.mu.Unlock()
		if r.Header.Get("Upgrade") == "echo" {
			conn, brw, err := http.NewResponseController(w).Hijack()
			if err != nil {
				return
			}
			defer conn.Close()
			brw.WriteString("HTTP/1.1 101 Switching Protocols\r\nConnection: Upgrade\r\nUpgrade: echo\r\n\r\n")
			brw.Flush()
			io.Copy(conn, brw)
			return
		}
		b, _ := io.ReadAll(r.Body)
		fmt.Fprintf(w, "n2 got %d bytes", len(b))
	})
	pr.n2.p.SetRoute(route.Route{App: "a", Endpoints: []route.Endpoint{{ID: "a-2", Addr: pr.b2.addr, Node: "n2"}}})
	pr.n1.p.SetRoute(route.Route{App: "a", Endpoints: []route.Endpoint{{ID: "a-2", Addr: pr.n2.addr, Node: "n2"}}})
	return pr
}

// TestHopReachesAnotherNodesReplica: a request to a node without a
// replica of the app is answered by the replica of another node, through
// that node's proxy, whatever way it takes (fast path, bodies small and
// large, chunked, an upgrade); the replica never sees the hop header, and
// the receiving node counts the request on the endpoint only.
func TestHopReachesAnotherNodesReplica(t *testing.T) {
	pr := newPair(t)
	if code, body, _ := pr.n1.get(t, "a.localhost", "/"); code != 200 || body != "n2 got 0 bytes" {
		t.Fatalf("GET through n1: %d %q", code, body)
	}
	for _, n := range []int{100, 256 << 10} {
		code, body, _ := pr.n1.do(t, pr.n1.req(t, "POST", "a.localhost", "/", strings.NewReader(strings.Repeat("x", n))))
		if want := fmt.Sprintf("n2 got %d bytes", n); code != 200 || body != want {
			t.Fatalf("POST of %d bytes through n1: %d %q", n, code, body)
		}
	}
	// A head the fast path leaves to net/http takes net/http's leg.
	r := pr.n1.req(t, "POST", "a.localhost", "/", strings.NewReader("expect me"))
	r.Header.Set("Expect", "100-continue")
	if code, body, _ := pr.n1.do(t, r); code != 200 || body != "n2 got 9 bytes" {
		t.Fatalf("POST with Expect through n1: %d %q", code, body)
	}
	r = pr.n1.req(t, "POST", "a.localhost", "/", io.MultiReader(strings.NewReader("chunk"), strings.NewReader("ed")))
	r.ContentLength = -1
	if code, body, _ := pr.n1.do(t, r); code != 200 || body != "n2 got 7 bytes" {
		t.Fatalf("chunked POST through n1: %d %q", code, body)
	}
	conn, err := net.Dial("tcp", pr.n1.addr)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	fmt.Fprint(conn, "GET /ws HTTP/1.1\r\nHost: a.localhost\r\nConnection: Upgrade\r\nUpgrade: echo\r\n\r\n")
	br := bufio.NewReader(conn)
	resp, err := http.ReadResponse(br, nil)
	if err != nil || resp.StatusCode != 101 {
		t.Fatalf("upgrade through n1: %v %v", resp, err)
	}
	fmt.Fprint(conn, "over two proxies\n")
	got := make(chan string, 1)
	go func() { l, _ := br.ReadString('\n'); got <- l }()
	if g := recv(t, got, "the echo"); g != "over two proxies\n" {
		t.Fatalf("echo %q", g)
	}
	conn.Close()
	eventually(t, "the upgrade to end on n2", func() bool { return pr.n2.p.WaitIdle(context.Background(), "a-2") == nil })
	pr.mu.Lock()
	for _, h := range pr.seen {
		if h[HopHeader] != nil {
			t.Errorf("the replica got the hop header: %v", h)
		}
	}
	if len(pr.seen) != 6 {
		t.Errorf("the replica got %d requests; want 6", len(pr.seen))
	}
	pr.mu.Unlock()
	if l := pr.n1.p.Load("a"); l.Requests != 6 || l.Endpoints["a-2"].Requests != 6 {
		t.Errorf("n1's load %+v; want 6 requests to a-2", l)
	}
	if l := pr.n2.p.Load("a"); l.Requests != 0 || l.Endpoints["a-2"].Requests != 0 || l.Endpoints["a-2"].InFlight != 0 {
		t.Errorf("n2's load %+v; the requests are n1's to report", l)
	}
}

// TestHopHeaderForged: a hop header whose MAC fails, or sent to a proxy
// outside a cluster, is refused 403 and reaches no replica.
func TestHopHeaderForged(t *testing.T) {
	pr := newPair(t)
	other := &hopConf{node: "n1", key: []byte("another secret")}
	now := time.Now().Unix()
	lone := newFront(t, Options{})
	lone.p.SetRoute(route.Route{App: "a", Endpoints: []route.Endpoint{{ID: "a-2", Addr: pr.b2.addr}}})
	for _, c := range []struct {
		f   *front
		hop string
	}{
		{pr.n2, "a-2 0123456789abcdef"},
		{pr.n2, other.header("a-2", "n2", "a.localhost", now)},
		{pr.n2, "a-2 " + strconv.FormatInt(now, 10)},
		{pr.n2, "a-2"},
		{pr.n2, ""},
		{lone, hopFor("a-2", "", "a.localhost", now)},
	} {
		r := c.f.req(t, "GET", "a.localhost", "/", nil)
		r.Header.Set(HopHeader, c.hop)
		code, body, _ := c.f.do(t, r)
		if code != http.StatusForbidden || apiError(t, body).Field != HopHeader {
			t.Errorf("hop %q: %d %q; want 403 naming %s", c.hop, code, body, HopHeader)
		}
	}
	// Two hop headers, one of them true: refused by net/http's path.
	conn, err := net.Dial("tcp", pr.n2.addr)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	fmt.Fprintf(conn, "GET / HTTP/1.1\r\nHost: a.localhost\r\n%s: %s\r\n%s: a-2 00\r\n\r\n",
		HopHeader, hopFor("a-2", "n2", "a.localhost", now), HopHeader)
	resp, err := http.ReadResponse(bufio.NewReader(conn), nil)
	if err != nil || resp.StatusCode != http.StatusForbidden {
		t.Fatalf("two hop headers: %v %v; want 403", resp, err)
	}
	if n := pr.b2.hits.Load(); n != 0 {
		t.Fatalf("a forged hop reached the replica %d times", n)
	}
	r := pr.n2.req(t, "GET", "a.localhost", "/", nil)
	r.Header.Set(HopHeader, hopFor("a-2", "n2", "a.localhost", now))
	if code, _, _ := pr.n2.do(t, r); code != 200 {
		t.Fatalf("a true hop: %d", code)
	}
}

// TestHopHeaderReplay: a hop header is good only within hopWindow of the
// receiving node's clock, only on the node and for the Host it was made
// for; a replayed, moved or early one is refused 403 and reaches no
// replica, on the fast path and on net/http's.
func TestHopHeaderReplay(t *testing.T) {
	fc := clock.NewFake(time.Unix(1_800_000_000, 0))
	pr := newPairOn(t, fc)
	window := time.Duration(hopWindow) * time.Second
	t0 := fc.Now().Unix()
	captured := hopFor("a-2", "n2", "a.localhost", t0)
	send := func(host, hop string, std bool) int {
		t.Helper()
		r := pr.n2.req(t, "GET", host, "/", nil)
		r.Header.Set(HopHeader, hop)
		if std {
			r.Header.Set("Expect", "100-continue") // a head the fast path leaves to net/http
		}
		code, _, _ := pr.n2.do(t, r)
		return code
	}
	if code, body, _ := pr.n1.get(t, "a.localhost", "/"); code != 200 || body != "n2 got 0 bytes" {
		t.Fatalf("GET through n1: %d %q", code, body)
	}
	served := int64(1)
	for _, std := range []bool{false, true} {
		if code := send("a.localhost", captured, std); code != 200 {
			t.Fatalf("a fresh hop header (net/http %v): %d; want 200", std, code)
		}
		served++
	}
	fc.Advance(window)
	if code := send("a.localhost", captured, false); code != 200 {
		t.Fatalf("a hop header %v old: %d; want 200", window, code)
	}
	served++
	fc.Advance(time.Second)
	now := fc.Now().Unix()
	for _, c := range []struct {
		what, host, hop string
	}{
		{"replayed after the window", "a.localhost", captured},
		{"made for another Host", "a.localhost", hopFor("a-2", "n2", "b.localhost", now)},
		{"sent with another Host", "A.localhost", hopFor("a-2", "n2", "a.localhost", now)},
		{"made for another node", "a.localhost", hopFor("a-2", "n1", "a.localhost", now)},
		{"from beyond the window ahead", "a.localhost", hopFor("a-2", "n2", "a.localhost", now+hopWindow+1)},
	} {
		for _, std := range []bool{false, true} {
			if code := send(c.host, c.hop, std); code != http.StatusForbidden {
				t.Errorf("a hop header %s (net/http %v): %d; want 403", c.what, std, code)
			}
		}
	}
	if code := send("a.localhost", hopFor("a-2", "n2", "a.localhost", now), false); code != 200 {
		t.Fatalf("a hop header made now: %d; want 200", code)
	}
	served++
	// The sending proxy stamps its headers with its clock's time, not the
	// one it stamped its last with.
	if code, body, _ := pr.n1.get(t, "a.localhost", "/"); code != 200 || body != "n2 got 0 bytes" {
		t.Fatalf("GET through n1 after the clock moved: %d %q", code, body)
	}
	served++
	if n := pr.b2.hits.Load(); n != served {
		t.Fatalf("the replica got %d requests; want the %d served", n, served)
	}
}

// TestHopNeverForwardsAgain: a hop to an endpoint the receiving proxy
// reaches through another hop (not its own) is not sent on.
func TestHopNeverForwardsAgain(t *testing.T) {
	pr := newPair(t)
	r := pr.n1.req(t, "GET", "a.localhost", "/", nil)
	r.Header.Set(HopHeader, hopFor("a-2", "n1", "a.localhost", time.Now().Unix()))
	code, body, hdr := pr.n1.do(t, r)
	if code != http.StatusServiceUnavailable || hdr.Get("Retry-After") == "" {
		t.Fatalf("a hop to a node that is not the endpoint's: %d %q; want 503", code, body)
	}
	if n := pr.b2.hits.Load(); n != 0 {
		t.Fatalf("the hop was sent on: the replica got %d requests", n)
	}
}

// TestLocalEndpointsFirst: a proxy sends to its own node's endpoints while
// one has room under the route's capacity, and to another node's once
// they are full.
func TestLocalEndpointsFirst(t *testing.T) {
	pr := newPair(t)
	release := make(chan struct{})
	started := make(chan struct{}, 4)
	b1 := newBackend(t, func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/hold" {
			started <- struct{}{}
			<-release
		}
		io.WriteString(w, "n1")
	})
	rt := route.Route{App: "a", Capacity: 1, Endpoints: []route.Endpoint{
		{ID: "a-1", Addr: b1.addr, Node: "n1"}, {ID: "a-2", Addr: pr.n2.addr, Node: "n2"}}}
	pr.n1.p.SetRoute(rt)
	for i := range 20 {
		if code, body, _ := pr.n1.get(t, "a.localhost", "/"); code != 200 || body != "n1" {
			t.Fatalf("request %d: %d %q; want n1's own replica", i, code, body)
		}
	}
	held := pr.n1.goDo(pr.n1.req(t, "GET", "a.localhost", "/hold", nil))
	recv(t, started, "the held request")
	if code, body, _ := pr.n1.get(t, "a.localhost", "/"); code != 200 || body != "n2 got 0 bytes" {
		t.Fatalf("with n1's replica at capacity: %d %q; want n2's", code, body)
	}
	close(release)
	if res := recv(t, held, "the held answer"); res.code != 200 {
		t.Fatalf("held request: %+v", res)
	}
}

// TestHopCountsForWaitIdle: the receiving node's WaitIdle of its endpoint
// waits for the hops in flight on it.
func TestHopCountsForWaitIdle(t *testing.T) {
	pr := newPair(t)
	release := make(chan struct{})
	started := make(chan struct{}, 1)
	b := newBackend(t, func(w http.ResponseWriter, r *http.Request) {
		started <- struct{}{}
		<-release
	})
	pr.n2.p.SetRoute(route.Route{App: "a", Endpoints: []route.Endpoint{{ID: "a-2", Addr: b.addr, Node: "n2"}}})
	res := pr.n1.goDo(pr.n1.req(t, "GET", "a.localhost", "/", nil))
	recv(t, started, "the hop to reach the replica")
	pr.n2.p.SetRoute(route.Route{App: "a"}) // a-2 leaves n2's route first
	ctx, cancel := context.WithCancel(context.Background())
	idle := make(chan error, 1)
	go func() { idle <- pr.n2.p.WaitIdle(ctx, "a-2") }()
	select {
	case err := <-idle:
		t.Fatalf("WaitIdle returned (%v) with a hop in flight", err)
	default:
	}
	close(release)
	if err := recv(t, idle, "WaitIdle"); err != nil {
		t.Fatal(err)
	}
	cancel()
	if r := recv(t, res, "the answer"); r.code != 200 {
		t.Fatalf("answer %+v", r)
	}
}
