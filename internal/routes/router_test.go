package routes

import (
	"context"
	"encoding/json"
	"errors"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/shoal-run/shoal/internal/cluster"
	"github.com/shoal-run/shoal/internal/errdefs"
	"github.com/shoal-run/shoal/internal/route"
	"github.com/shoal-run/shoal/internal/store"
)

// TestRoutesReachEveryNode: the leader's route goes to its own proxy and,
// through the store, to every follower's, each reaching the replicas of
// other nodes at those nodes' proxies; a removed app leaves them all.
func TestRoutesReachEveryNode(t *testing.T) {
	g := newRig(t)
	n1 := g.node("n1", true)
	n2 := g.node("n2", false)
	n1.r.SetRoute(webRoute("r1a", "r2a"))
	if got, want := n1.proxy.addrs("web"), []string{"r1a@10.88.0.1:8080", "r2a@192.0.2.2:80"}; !slices.Equal(got, want) {
		t.Fatalf("leader's proxy routes %v; want %v", got, want)
	}
	want2 := []string{"r1a@192.0.2.1:80", "r2a@10.88.0.2:8080"}
	g.until("n2's proxy routes web", func() bool { return slices.Equal(n2.proxy.addrs("web"), want2) })
	kv, err := g.st.Get(context.Background(), store.RouteKey("web"))
	if err != nil {
		t.Fatal(err)
	}
	var rec record
	if err := json.Unmarshal(kv.Value, &rec); err != nil || rec.Leader != "n1" || rec.Route.QueueLimit != 7 {
		t.Fatalf("stored route %s: %v", kv.Value, err)
	}
	// A node that starts later lists what is there.
	n3 := g.node("n3", false)
	<-n3.r.Synced()
	g.until("n3's proxy routes web", func() bool {
		return slices.Equal(n3.proxy.addrs("web"), []string{"r1a@192.0.2.1:80", "r2a@192.0.2.2:80"})
	})
	// A node's proxy moves: its endpoints follow.
	b, _ := json.Marshal(cluster.Record{Name: "n1", ProxyAddr: "192.0.2.11:80"})
	if _, err := g.st.Put(context.Background(), store.NodeKey("n1"), b); err != nil {
		t.Fatal(err)
	}
	g.until("n2 reaches n1's moved proxy", func() bool {
		return slices.Equal(n2.proxy.addrs("web"), []string{"r1a@192.0.2.11:80", "r2a@10.88.0.2:8080"})
	})
	n1.r.RemoveRoute("web")
	if n1.proxy.addrs("web") != nil {
		t.Fatal("the leader's proxy still routes web")
	}
	g.until("the followers drop web", func() bool { return n2.proxy.addrs("web") == nil && n3.proxy.addrs("web") == nil })
	if _, err := g.st.Get(context.Background(), store.RouteKey("web")); !errdefs.IsNotFound(err) {
		t.Fatalf("route key after removal: %v; want not found", err)
	}
}

// TestFollowerWritesNothing: a route published on a node that does not
// lead goes nowhere: its proxy and the store keep the leader's.
func TestFollowerWritesNothing(t *testing.T) {
	g := newRig(t)
	n1 := g.node("n1", true)
	n2 := g.node("n2", false)
	n1.r.SetRoute(webRoute("r1a"))
	g.until("n2 routes web", func() bool { return len(n2.proxy.addrs("web")) == 1 })
	n2.r.SetRoute(webRoute("r2a"))
	kv, err := g.st.Get(context.Background(), store.RouteKey("web"))
	if err != nil {
		t.Fatal(err)
	}
	var rec record
	json.Unmarshal(kv.Value, &rec)
	if rec.Leader != "n1" || len(rec.Route.Endpoints) != 1 || rec.Route.Endpoints[0].ID != "r1a" {
		t.Fatalf("stored route %s; want n1's", kv.Value)
	}
	if got := n2.proxy.addrs("web"); !slices.Equal(got, []string{"r1a@192.0.2.1:80"}) {
		t.Fatalf("n2's proxy routes %v; want the leader's route", got)
	}
	n2.r.RemoveRoute("web")
	if n2.proxy.addrs("web") == nil {
		t.Fatal("a follower removed the leader's route from its proxy")
	}
}

// TestWaitIdleWaitsForEveryNode: the leader's WaitIdle of a dropped
// endpoint returns only once each live node has applied the route that
// dropped it and its proxy is idle on it.
func TestWaitIdleWaitsForEveryNode(t *testing.T) {
	g := newRig(t)
	n1 := g.node("n1", true)
	n2 := g.node("n2", false)
	n3 := g.node("n3", false)
	n1.r.SetRoute(webRoute("r1a", "r2a"))
	g.until("followers route web", func() bool { return len(n2.proxy.addrs("web")) == 2 && len(n3.proxy.addrs("web")) == 2 })
	n1.r.SetRoute(webRoute("r1a"))
	done := make(chan error, 1)
	go func() { done <- n1.r.WaitIdle(context.Background(), "r2a") }()
	close(n1.proxy.idleChan("r2a"))
	close(n2.proxy.idleChan("r2a"))
	select {
	case err := <-done:
		t.Fatalf("WaitIdle returned (%v) while n3's proxy holds a request on r2a", err)
	case <-time.After(50 * time.Millisecond):
	}
	for _, n := range []*testNode{n2, n3} {
		if got := n.proxy.addrs("web"); !slices.Equal(got, []string{"r1a@192.0.2.1:80"}) {
			t.Fatalf("a follower waited on routes %v: the dropping route is not applied", got)
		}
	}
	close(n3.proxy.idleChan("r2a"))
	if err := <-done; err != nil {
		t.Fatalf("WaitIdle: %v", err)
	}
	g.peers.mu.Lock()
	calls := slices.Sorted(slices.Values(g.peers.calls))
	g.peers.mu.Unlock()
	if !slices.Equal(calls, []string{"n2", "n3"}) {
		t.Fatalf("nodes waited on %v; want n2 and n3", calls)
	}
}

// TestWaitIdleOnTheReplicasNode: serving drains a replica on the node it
// runs on, a follower: its WaitIdle waits until every node, itself and the
// leader too, has applied a route without the endpoint and its proxy is
// idle on it.
func TestWaitIdleOnTheReplicasNode(t *testing.T) {
	g := newRig(t)
	n1 := g.node("n1", true)
	n2 := g.node("n2", false)
	n3 := g.node("n3", false)
	n1.r.SetRoute(webRoute("r1a", "r2a"))
	g.until("followers route web", func() bool { return len(n2.proxy.addrs("web")) == 2 && len(n3.proxy.addrs("web")) == 2 })
	for _, n := range []*testNode{n1, n2, n3} {
		close(n.proxy.idleChan("r2a"))
	}
	// n2's drain begins before the leader's route without r2a is out: it
	// waits for it on every node.
	done := make(chan error, 1)
	go func() { done <- n2.r.WaitIdle(context.Background(), "r2a") }()
	select {
	case err := <-done:
		t.Fatalf("WaitIdle returned (%v) while every node still routes r2a", err)
	case <-time.After(50 * time.Millisecond):
	}
	n1.r.SetRoute(webRoute("r1a"))
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	for _, n := range []*testNode{n2, n3} {
		if got := n.proxy.addrs("web"); len(got) != 1 {
			t.Fatalf("WaitIdle returned while a node routes %v", got)
		}
	}
	g.peers.mu.Lock()
	defer g.peers.mu.Unlock()
	if calls := slices.Sorted(slices.Values(g.peers.calls)); !slices.Equal(calls, []string{"n1", "n3"}) {
		t.Fatalf("n2 waited on %v; want n1 and n3", calls)
	}
}

// TestWaitIdleAfterRemoval: the endpoints of a removed app are idle once
// every node has removed the app and its proxy is idle on them.
func TestWaitIdleAfterRemoval(t *testing.T) {
	g := newRig(t)
	n1 := g.node("n1", true)
	n2 := g.node("n2", false)
	n1.r.SetRoute(webRoute("r1a", "r2a"))
	g.until("n2 routes web", func() bool { return len(n2.proxy.addrs("web")) == 2 })
	n1.r.RemoveRoute("web")
	close(n1.proxy.idleChan("r2a"))
	close(n2.proxy.idleChan("r2a"))
	if err := n1.r.WaitIdle(context.Background(), "r2a"); err != nil {
		t.Fatal(err)
	}
	if n2.proxy.addrs("web") != nil {
		t.Fatal("WaitIdle returned before n2 removed the app")
	}
}

// TestWaitAppliedWaitsForTheRoute: a node asked to wait for a route it
// has not applied yet waits for it (or for the endpoint to leave its
// table), within the caller's time.
func TestWaitAppliedWaitsForTheRoute(t *testing.T) {
	g := newRig(t)
	n1 := g.node("n1", true)
	n2 := g.node("n2", false)
	n1.r.SetRoute(webRoute("r1a", "r2a"))
	g.until("n2 routes web", func() bool { return len(n2.proxy.addrs("web")) == 2 })
	close(n2.proxy.idleChan("r2a"))
	n2.r.mu.Lock()
	next := n2.r.rev + 1000
	n2.r.mu.Unlock()
	ctx, cancel := context.WithTimeout(context.Background(), 50*time.Millisecond)
	defer cancel()
	if err := n2.r.WaitApplied(ctx, "r2a", next); !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("WaitApplied of a route not applied: %v; want the deadline", err)
	}
	done := make(chan error, 1)
	go func() { done <- n2.r.WaitApplied(context.Background(), "r2a", next) }()
	n1.r.SetRoute(webRoute("r1a"))
	if err := <-done; err != nil {
		t.Fatalf("WaitApplied once the endpoint left: %v", err)
	}
}

// TestDeposedLeaderWaitsBounded: a route change the store refuses (the
// term is over) reaches no other node, which keeps routing the endpoint:
// the wait for it ends with the caller's time (the drain's grace).
func TestDeposedLeaderWaitsBounded(t *testing.T) {
	g := newRig(t)
	n1 := g.node("n1", true)
	n2 := g.node("n2", false)
	n1.r.SetRoute(webRoute("r1a", "r2a"))
	g.until("n2 routes web", func() bool { return len(n2.proxy.addrs("web")) == 2 })
	g.term.mu.Lock()
	g.term.refuse = true
	g.term.mu.Unlock()
	n1.r.SetRoute(webRoute("r1a"))
	close(n1.proxy.idleChan("r2a"))
	close(n2.proxy.idleChan("r2a"))
	ctx, cancel := context.WithTimeout(context.Background(), 100*time.Millisecond)
	defer cancel()
	if err := n1.r.WaitIdle(ctx, "r2a"); !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("WaitIdle while n2 still routes r2a: %v; want the caller's deadline", err)
	}
	kv, err := g.st.Get(context.Background(), store.RouteKey("web"))
	var rec record
	if err != nil || json.Unmarshal(kv.Value, &rec) != nil || len(rec.Route.Endpoints) != 2 {
		t.Fatalf("stored route %s, %v; want the one written before the term ended", kv.Value, err)
	}
}

// TestLeaderPrunesStaleRoutes: a route in the store for an app the leader
// does not run (its removal was not finished by the previous leader) is
// removed once the leader has led through two prune ticks.
func TestLeaderPrunesStaleRoutes(t *testing.T) {
	g := newRig(t)
	b, _ := json.Marshal(record{Route: webRoute("r2a"), Leader: "n9"})
	ctx := context.Background()
	if _, err := g.st.Put(ctx, store.RouteKey("gone"), b); err != nil {
		t.Fatal(err)
	}
	n1 := g.node("n1", true)
	<-n1.r.Synced()
	n1.r.SetRoute(webRoute("r1a"))
	g.until("the prune timer", func() bool { return g.clk.Timers() > 0 })
	g.clk.Advance(PruneEvery)
	g.until("the next prune timer", func() bool { return g.clk.Timers() > 0 })
	if _, err := g.st.Get(ctx, store.RouteKey("gone")); err != nil {
		t.Fatalf("pruned at the first tick: %v", err)
	}
	g.clk.Advance(PruneEvery)
	g.until("the stale route removed", func() bool {
		_, err := g.st.Get(ctx, store.RouteKey("gone"))
		return errdefs.IsNotFound(err)
	})
	if _, err := g.st.Get(ctx, store.RouteKey("web")); err != nil {
		t.Fatalf("the route of an app the leader runs: %v", err)
	}
}

// TestLoadAddsFreshReports: the leader's Load is its proxy's plus every
// follower's report younger than ReportMaxAge.
func TestLoadAddsFreshReports(t *testing.T) {
	g := newRig(t)
	n1 := g.node("n1", true)
	at := g.clk.Now().Add(-time.Second)
	n1.proxy.loads["web"] = route.Load{InFlight: 2, Requests: 10, LastRequest: at,
		Endpoints: map[string]route.EndpointLoad{"r1a": {InFlight: 2, Requests: 10, LastRequest: at}}}
	n1.r.Report("n2", map[string]route.Load{"web": {InFlight: 3, Queued: 1, Requests: 5, LastRequest: g.clk.Now(),
		Endpoints: map[string]route.EndpointLoad{"r1a": {InFlight: 1, Requests: 2}, "r2a": {InFlight: 2, Requests: 3, LastRequest: g.clk.Now()}}}})
	g.clk.Advance(2 * time.Second)
	n1.r.Report("n3", map[string]route.Load{"web": {InFlight: 1, Requests: 1}})
	l := n1.r.Load("web")
	if l.InFlight != 6 || l.Queued != 1 || l.Requests != 16 || !l.LastRequest.Equal(g.clk.Now().Add(-2*time.Second)) {
		t.Fatalf("load %+v; want 6 in flight, 1 queued, 16 requests, the newest last request", l)
	}
	if e := l.Endpoints["r1a"]; e.InFlight != 3 || e.Requests != 12 || !e.LastRequest.Equal(at) {
		t.Fatalf("endpoint r1a %+v", e)
	}
	if e := l.Endpoints["r2a"]; e.InFlight != 2 {
		t.Fatalf("endpoint r2a %+v", e)
	}
	// n2's report is now 3.5 s old: it counts no more; n3's (1.5 s) does.
	g.clk.Advance(1500 * time.Millisecond)
	if l := n1.r.Load("web"); l.InFlight != 3 || l.Requests != 11 {
		t.Fatalf("load after n2's report aged: %+v; want 3 in flight, 11 requests", l)
	}
}

// TestFollowerReportsBusyApps: a follower reports each second the apps
// with traffic, then once that none has any, then nothing.
func TestFollowerReportsBusyApps(t *testing.T) {
	g := newRig(t)
	n2 := g.node("n2", false)
	var mu sync.Mutex
	loads := map[string]route.Load{"web": {InFlight: 1, Requests: 4}, "idle": {Requests: 9}}
	get := func() map[string]route.Load {
		mu.Lock()
		defer mu.Unlock()
		return loads
	}
	s := &sink{}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { defer close(done); n2.r.ReportLoads(ctx, get, s) }()
	defer func() { cancel(); <-done }()
	// The node's timers: its prune tick, and the report's once armed.
	armed := func() bool { return g.clk.Timers() >= 2 }
	tick := func(want int) {
		t.Helper()
		g.until("the report timer", armed)
		g.clk.Advance(ReportEvery)
		g.until("a report", func() bool { return s.count() >= want })
	}
	report := func(i int) map[string]route.Load {
		s.mu.Lock()
		defer s.mu.Unlock()
		return s.reports[i]
	}
	tick(1) // first report: both apps have requests not seen before
	if r := report(0); len(r) != 2 {
		t.Fatalf("first report %v; want web and idle", r)
	}
	tick(2)
	if r := report(1); len(r) != 1 || r["web"].InFlight != 1 {
		t.Fatalf("second report %v; want web only (idle had no new request)", r)
	}
	mu.Lock()
	loads = map[string]route.Load{"web": {Requests: 4}, "idle": {Requests: 9}}
	mu.Unlock()
	tick(3)
	if r := report(2); len(r) != 0 {
		t.Fatalf("third report %v; want none busy", r)
	}
	g.until("the report timer", armed)
	g.clk.Advance(ReportEvery)
	g.until("the next report timer", armed)
	if s.count() != 3 {
		t.Fatalf("%d reports; a quiet follower sends no more after telling once", s.count())
	}
}

// TestRevokedLeaderFollows: once its lead is revoked, a node's Router
// writes nothing more and its proxy takes the store's routes again.
func TestRevokedLeaderFollows(t *testing.T) {
	g := newRig(t)
	n1 := g.node("n1", true)
	n1.r.SetRoute(webRoute("r1a"))
	g.until("web stored and seen", func() bool {
		n1.r.mu.Lock()
		defer n1.r.mu.Unlock()
		_, ok := n1.r.stored["web"]
		return ok
	})
	n1.r.Revoke()
	if n1.r.Leading() {
		t.Fatal("leading after Revoke")
	}
	n1.r.SetRoute(webRoute("r1b"))
	kv, err := g.st.Get(context.Background(), store.RouteKey("web"))
	if err != nil {
		t.Fatal(err)
	}
	var rec record
	json.Unmarshal(kv.Value, &rec)
	if len(rec.Route.Endpoints) != 1 || rec.Route.Endpoints[0].ID != "r1a" {
		t.Fatalf("stored route after Revoke %s; want r1a's", kv.Value)
	}
	if got := n1.proxy.addrs("web"); !slices.Equal(got, []string{"r1a@10.88.0.1:8080"}) {
		t.Fatalf("n1's proxy routes %v after Revoke; want the stored route", got)
	}
}

// TestLoadKeepsTCPAndAnswered: the leader's Load keeps its own proxy's TCP
// listener, tells a follower's failure to listen with the follower's
// name, and sums the answers each endpoint gave (the health checks'
// proof of life); a follower reports an app whose port it cannot listen
// on even without traffic.
func TestLoadKeepsTCPAndAnswered(t *testing.T) {
	g := newRig(t)
	n1 := g.node("n1", true)
	n1.proxy.loads["db"] = route.Load{TCP: "0.0.0.0:13306",
		Endpoints: map[string]route.EndpointLoad{"db1": {Requests: 4, Answered: 4}}}
	n1.r.Report("n2", map[string]route.Load{"db": {TCPError: "bind: address already in use",
		Endpoints: map[string]route.EndpointLoad{"db1": {Requests: 3, Answered: 2}}}})
	l := n1.r.Load("db")
	if l.TCP != "0.0.0.0:13306" || l.TCPError != "node n2: bind: address already in use" {
		t.Fatalf("load: tcp %q, tcp error %q", l.TCP, l.TCPError)
	}
	if e := l.Endpoints["db1"]; e.Answered != 6 || e.Requests != 7 {
		t.Fatalf("endpoint db1 %+v; want 7 requests, 6 answered", e)
	}
	quiet := map[string]route.Load{"db": {TCPError: "bind: address already in use", Requests: 1}, "web": {Requests: 2}}
	if got := busiest(quiet, quiet); len(got) != 1 || got["db"].TCPError == "" {
		t.Fatalf("busiest without traffic: %v; want db, whose port has no listener", got)
	}
}
