package routes

import (
	"context"
	"encoding/json"
	"path/filepath"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/shoal-run/shoal/internal/clock"
	"github.com/shoal-run/shoal/internal/cluster"
	"github.com/shoal-run/shoal/internal/errdefs"
	"github.com/shoal-run/shoal/internal/route"
	"github.com/shoal-run/shoal/internal/store"
)

// proxyTable is a node's proxy as a Local: its table, and WaitIdle that
// returns once the test lets the endpoint go idle.
type proxyTable struct {
	mu     sync.Mutex
	routes map[string]route.Route
	loads  map[string]route.Load
	idle   map[string]chan struct{}
	cuts   []string
}

func newProxyTable() *proxyTable {
	return &proxyTable{routes: map[string]route.Route{}, loads: map[string]route.Load{}, idle: map[string]chan struct{}{}}
}

func (p *proxyTable) SetRoute(r route.Route) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.routes[r.App] = r
}

func (p *proxyTable) RemoveRoute(app string) {
	p.mu.Lock()
	defer p.mu.Unlock()
	delete(p.routes, app)
}

func (p *proxyTable) Load(app string) route.Load {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.loads[app]
}

func (p *proxyTable) idleChan(id string) chan struct{} {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.idle[id] == nil {
		p.idle[id] = make(chan struct{})
	}
	return p.idle[id]
}

func (p *proxyTable) WaitIdle(ctx context.Context, id string) error {
	select {
	case <-p.idleChan(id):
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

// Cut notes that the endpoint's requests were cut.
func (p *proxyTable) Cut(id string) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.cuts = append(p.cuts, id)
}

// cutIDs returns the endpoints cut so far.
func (p *proxyTable) cutIDs() []string {
	p.mu.Lock()
	defer p.mu.Unlock()
	return slices.Clone(p.cuts)
}

// addrs returns app's endpoints as "id@addr", or nil without a route.
func (p *proxyTable) addrs(app string) []string {
	p.mu.Lock()
	defer p.mu.Unlock()
	rt, ok := p.routes[app]
	if !ok {
		return nil
	}
	out := []string{}
	for _, e := range rt.Endpoints {
		out = append(out, e.ID+"@"+e.Addr)
	}
	return out
}

// storeTerm writes straight to the store, as a leader whose term lasts
// until refuse is set.
type storeTerm struct {
	st     store.Store
	mu     sync.Mutex
	refuse bool // writes are refused, as the store refuses a deposed leader's
}

func (t *storeTerm) refused() bool {
	t.mu.Lock()
	defer t.mu.Unlock()
	return t.refuse
}

func (t *storeTerm) Put(ctx context.Context, key string, value []byte) (int64, error) {
	if t.refused() {
		return 0, cluster.ErrDeposed
	}
	return t.st.Put(ctx, key, value)
}

func (t *storeTerm) Delete(ctx context.Context, key string) error {
	if t.refused() {
		return cluster.ErrDeposed
	}
	if err := t.st.Delete(ctx, key); err != nil && !errdefs.IsNotFound(err) {
		return err
	}
	return nil
}

func (t *storeTerm) CompareAndSwap(ctx context.Context, key string, rev int64, value []byte) (int64, error) {
	if t.refused() {
		return 0, cluster.ErrDeposed
	}
	return t.st.CompareAndSwap(ctx, key, rev, value)
}

// peers is the leader's view of the other nodes: their routers, called
// as the agent would.
type peers struct {
	mu    sync.Mutex
	nodes map[string]*Router
	calls []string
}

func (p *peers) Live() []string {
	p.mu.Lock()
	defer p.mu.Unlock()
	var out []string
	for n := range p.nodes {
		out = append(out, n)
	}
	slices.Sort(out)
	return out
}

func (p *peers) WaitIdle(ctx context.Context, node, id string, seq int64) error {
	p.mu.Lock()
	r := p.nodes[node]
	p.calls = append(p.calls, node)
	p.mu.Unlock()
	return r.WaitApplied(ctx, id, seq)
}

type testNode struct {
	r     *Router
	proxy *proxyTable
}

type rig struct {
	t     *testing.T
	st    *store.Bolt
	clk   *clock.Fake
	term  *storeTerm
	peers *peers
}

func newRig(t *testing.T) *rig {
	st, err := store.OpenBolt(filepath.Join(t.TempDir(), "store.db"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { st.Close() })
	g := &rig{t: t, st: st, clk: clock.NewFake(time.Unix(1_700_000_000, 0)), peers: &peers{nodes: map[string]*Router{}}}
	g.term = &storeTerm{st: st}
	for _, n := range []string{"n1", "n2", "n3"} {
		b, _ := json.Marshal(cluster.Record{Name: n, ProxyAddr: "192.0.2." + n[1:] + ":80"})
		if _, err := st.Put(context.Background(), store.NodeKey(n), b); err != nil {
			t.Fatal(err)
		}
	}
	return g
}

// node starts the router of a node; the leader's term is the rig's.
func (g *rig) node(name string, leader bool) *testNode {
	n := &testNode{proxy: newProxyTable()}
	n.r = New(Options{Store: g.st, Node: name, Local: n.proxy, Peers: g.peers, Clock: g.clk})
	if leader {
		n.r.lead(g.term) // as the Hub's Establish does
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { defer close(done); n.r.Run(ctx) }()
	g.t.Cleanup(func() { cancel(); <-done })
	g.peers.mu.Lock()
	g.peers.nodes[name] = n.r
	g.peers.mu.Unlock()
	g.until(name+" knows the nodes' proxies", func() bool {
		n.r.mu.Lock()
		defer n.r.mu.Unlock()
		return len(n.r.addrs) == 3
	})
	return n
}

func (g *rig) until(what string, cond func() bool) {
	g.t.Helper()
	deadline := time.Now().Add(5 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			g.t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(2 * time.Millisecond)
	}
}

func webRoute(ids ...string) route.Route {
	rt := route.Route{App: "web", QueueLimit: 7}
	for _, id := range ids {
		node := "n" + id[1:2] // "r2a" runs on n2
		rt.Endpoints = append(rt.Endpoints, route.Endpoint{ID: id, Addr: "10.88.0." + id[1:2] + ":8080", Revision: 1, Node: node})
	}
	return rt
}

type sink struct {
	mu      sync.Mutex
	reports []map[string]route.Load
}

func (s *sink) ReportLoad(ctx context.Context, node string, loads map[string]route.Load) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.reports = append(s.reports, loads)
	return nil
}

func (s *sink) count() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return len(s.reports)
}
