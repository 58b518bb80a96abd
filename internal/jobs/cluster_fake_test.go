package jobs

import (
	"context"
	"encoding/json"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/shoal-run/shoal/internal/api/types"
	"github.com/shoal-run/shoal/internal/clock"
	"github.com/shoal-run/shoal/internal/cluster"
	"github.com/shoal-run/shoal/internal/store"
)

// fakeNet is the membership of a cluster of Managers sharing one bolt
// store: which nodes are live (and their slots), and who leads in which
// term. The tests change it as nodes die and leaders change.
type fakeNet struct {
	st     store.Store
	mu     sync.Mutex
	leader string
	term   int
	nodes  map[string]Node
	subs   []chan struct{}
	events []string
	// deposed names a node that still believes it leads, with the fence
	// of its old term, as a leader cut off does until it learns otherwise.
	deposed map[string]int
	refused int // fenced writes refused
	// hang makes fenced writes block until their context ends, as the
	// writes of a leader cut off from etcd do; hung counts them, and
	// gaveUp those that ended.
	hang         bool
	hung, gaveUp int
}

func newFakeNet(st store.Store) *fakeNet { return &fakeNet{st: st, nodes: map[string]Node{}} }

func (n *fakeNet) notify() {
	n.mu.Lock()
	defer n.mu.Unlock()
	for _, ch := range n.subs {
		select {
		case ch <- struct{}{}:
		default:
		}
	}
}

func (n *fakeNet) setLive(node Node, live bool) {
	n.mu.Lock()
	if live {
		n.nodes[node.Name] = node
	} else {
		delete(n.nodes, node.Name)
	}
	n.mu.Unlock()
	n.notify()
}

func (n *fakeNet) lead(name string) {
	n.mu.Lock()
	n.leader = name
	n.term++
	n.mu.Unlock()
	n.notify()
}

func (n *fakeNet) event(kind, reason string) {
	n.mu.Lock()
	n.events = append(n.events, kind+": "+reason)
	n.mu.Unlock()
}

func (n *fakeNet) eventLog() []string {
	n.mu.Lock()
	defer n.mu.Unlock()
	return append([]string(nil), n.events...)
}

// fakeMember is one node's view of a fakeNet: the live nodes (jobs.Cluster)
// and the elections its Hub follows (cluster.Elections).
type fakeMember struct {
	net  *fakeNet
	self string
}

func (c fakeMember) Nodes(context.Context) ([]cluster.Node, error) {
	c.net.mu.Lock()
	defer c.net.mu.Unlock()
	var out []cluster.Node
	for _, n := range c.net.nodes {
		state := cluster.StateReady
		if n.Draining {
			state = cluster.StateDraining
		}
		out = append(out, cluster.Node{Record: cluster.Record{Name: n.Name, JobSlots: n.Slots, Draining: n.Draining}, State: state})
	}
	return out, nil
}

func (c fakeMember) Changed() <-chan struct{} {
	c.net.mu.Lock()
	defer c.net.mu.Unlock()
	ch := make(chan struct{}, 1)
	c.net.subs = append(c.net.subs, ch)
	return ch
}

func (c fakeMember) Leading() cluster.Term {
	c.net.mu.Lock()
	defer c.net.mu.Unlock()
	if term, ok := c.net.deposed[c.self]; ok {
		return fakeFence{net: c.net, node: c.self, term: term}
	}
	if c.net.leader != c.self {
		return nil
	}
	return fakeFence{net: c.net, node: c.self, term: c.net.term}
}

// fakeFence refuses a write once its term is over, as etcd refuses a
// deposed leader's.
type fakeFence struct {
	net  *fakeNet
	node string
	term int
}

func (f fakeFence) CompareAndSwap(ctx context.Context, key string, rev int64, value []byte) (int64, error) {
	f.net.mu.Lock()
	defer f.net.mu.Unlock()
	if f.net.hang {
		f.net.hung++
		f.net.mu.Unlock()
		<-ctx.Done()
		f.net.mu.Lock()
		f.net.gaveUp++
		return 0, fmt.Errorf("key %q: %w", key, ctx.Err())
	}
	if f.net.leader != f.node || f.net.term != f.term {
		f.net.refused++
		return 0, fmt.Errorf("key %q: term %d of %s: %w", key, f.term, f.node, cluster.ErrDeposed)
	}
	return f.net.st.CompareAndSwap(ctx, key, rev, value)
}

// Put and Delete complete cluster.Term; the queue writes by
// compare-and-swap only.
func (f fakeFence) Put(ctx context.Context, key string, value []byte) (int64, error) {
	return 0, fmt.Errorf("key %q: the queue writes by compare-and-swap only", key)
}

func (f fakeFence) Delete(ctx context.Context, key string) error {
	return fmt.Errorf("key %q: the queue writes by compare-and-swap only", key)
}

// testCluster is a cluster of Managers on one store, each with its own
// runner.
type testCluster struct {
	t       *testing.T
	st      store.Store
	net     *fakeNet
	clk     *clock.Fake
	o       Options
	mgrs    map[string]*ClusterQueue
	runners map[string]*fakeRunner
}

func newTestCluster(t *testing.T, o Options) *testCluster {
	st := openStore(t)
	c := &testCluster{t: t, st: st, net: newFakeNet(st), clk: clock.NewFake(time.Unix(1_000_000, 0)), o: o,
		mgrs: map[string]*ClusterQueue{}, runners: map[string]*fakeRunner{}}
	t.Cleanup(func() {
		for _, m := range c.mgrs {
			m.Close()
		}
	})
	return c
}

// add opens node name's Manager with slots, and makes the node live.
func (c *testCluster) add(name string, slots int) *ClusterQueue {
	c.t.Helper()
	o := c.o
	o.Store, o.Slots, o.Clock, o.Event = c.st, slots, c.clk, c.net.event
	member := fakeMember{net: c.net, self: name}
	hub := cluster.NewHub(member, c.clk, nil)
	o.Cluster, o.Node = hub, name
	fr := newFakeRunner(true)
	o.Runner = fr
	m, err := OpenCluster(context.Background(), o)
	if err != nil {
		c.t.Fatal(err)
	}
	// The node's leadership, as the daemon's Hub runs it.
	hub.Register(m)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { defer close(done); hub.Run(ctx, member) }()
	c.t.Cleanup(func() { cancel(); <-done })
	c.mgrs[name], c.runners[name] = m, fr
	c.net.setLive(Node{Name: name, Slots: slots}, true)
	return m
}

// running returns the stored running jobs by node.
func (c *testCluster) running() map[string][]Job {
	out := map[string][]Job{}
	kvs, _ := c.st.List(context.Background(), store.JobsPrefix)
	for _, kv := range kvs {
		var r record
		json.Unmarshal(kv.Value, &r)
		if r.Job.State == Running {
			out[r.Job.Node] = append(out[r.Job.Node], r.Job)
		}
	}
	return out
}

func (c *testCluster) countRunning() int {
	n := 0
	for _, js := range c.running() {
		n += len(js)
	}
	return n
}

// finish ends job j on the node that runs it, once its runner has it (the
// record says running before the runner starts).
func (c *testCluster) finish(j Job) {
	c.t.Helper()
	fr := c.runners[j.Node]
	waitFor(c.t, "job "+j.ID+" in its runner", func() bool {
		fr.mu.Lock()
		defer fr.mu.Unlock()
		return fr.release[j.ID] != nil
	})
	fr.finish(j.ID)
}

func submit(t *testing.T, m Queue, tenant string, n int) []Job {
	t.Helper()
	reqs := make([]types.JobRequest, n)
	for i := range reqs {
		reqs[i] = hello(tenant)
	}
	js, err := m.Submit(context.Background(), reqs)
	if err != nil {
		t.Fatal(err)
	}
	return js
}
