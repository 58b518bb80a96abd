package serving

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/shoal-run/shoal/internal/cluster"
	"github.com/shoal-run/shoal/internal/errdefs"
	"github.com/shoal-run/shoal/internal/localnode"
	"github.com/shoal-run/shoal/internal/manifest"
	"github.com/shoal-run/shoal/internal/node"
	"github.com/shoal-run/shoal/internal/placement"
	"github.com/shoal-run/shoal/internal/statemerge"
	"github.com/shoal-run/shoal/internal/store"
)

// fakeTerm is a leadership over the test's store; once over, its writes
// are refused as etcd refuses a deposed leader's.
type fakeTerm struct {
	st   store.Store
	over atomic.Bool
}

func (t *fakeTerm) Put(ctx context.Context, key string, val []byte) (int64, error) {
	if t.over.Load() {
		return 0, fmt.Errorf("key %q: %w", key, cluster.ErrDeposed)
	}
	return t.st.Put(ctx, key, val)
}

func (t *fakeTerm) Delete(ctx context.Context, key string) error {
	if t.over.Load() {
		return fmt.Errorf("key %q: %w", key, cluster.ErrDeposed)
	}
	return t.st.Delete(ctx, key)
}

func (t *fakeTerm) CompareAndSwap(ctx context.Context, key string, rev int64, val []byte) (int64, error) {
	if t.over.Load() {
		return 0, fmt.Errorf("key %q: %w", key, cluster.ErrDeposed)
	}
	return t.st.CompareAndSwap(ctx, key, rev, val)
}

// NodeInfo is a live node of a fakeCluster.
type NodeInfo struct {
	Name         string
	CPUs         int
	Memory       int64 // bytes
	FrozenMemory int64 // bytes frozen replicas may hold there (0: this host's budget)
	Draining     bool  // a member that takes no new replica
}

// fakeCluster is a cluster whose leadership and live nodes the test sets:
// the elections a cluster.Hub follows, and its members (fakeMembers).
type fakeCluster struct {
	mu    sync.Mutex
	term  cluster.Term
	nodes []NodeInfo
	ch    chan struct{} // the leadership changed
	mch   chan struct{} // the live nodes changed
}

func (c *fakeCluster) Leading() cluster.Term {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.term
}

func (c *fakeCluster) Changed() <-chan struct{} { return c.ch }

// set changes the leadership and live nodes and tells the Hub.
func (c *fakeCluster) set(t cluster.Term, nodes ...NodeInfo) {
	c.mu.Lock()
	c.term, c.nodes = t, nodes
	c.mu.Unlock()
	poke(c.ch)
	poke(c.mch)
}

// fakeMembers is the live nodes of a fakeCluster.
type fakeMembers struct{ c *fakeCluster }

func (f fakeMembers) Nodes(context.Context) ([]cluster.Node, error) {
	f.c.mu.Lock()
	defer f.c.mu.Unlock()
	var out []cluster.Node
	for _, n := range f.c.nodes {
		state := cluster.StateReady
		if n.Draining {
			state = cluster.StateDraining
		}
		out = append(out, cluster.Node{Record: cluster.Record{Name: n.Name, CPUs: n.CPUs, Memory: n.Memory,
			FrozenMemory: n.FrozenMemory, Draining: n.Draining}, State: state})
	}
	return out, nil
}

func (f fakeMembers) Changed() <-chan struct{} { return f.c.mch }

// countingNode is a node of the cluster on a fake runtime of its own; it
// counts the calls made to it.
type countingNode struct {
	Node
	rt    *fakeRuntime
	dir   string // its apps folder
	calls atomic.Int32
	// mute makes its checks, drains, stops and removals fail as calls to
	// a node that does not answer do.
	mute atomic.Bool
}

// muted is the error of a call to a node that does not answer.
func (n *countingNode) muted() error {
	if n.mute.Load() {
		return fmt.Errorf("node does not answer: %w", errdefs.ErrUnavailable)
	}
	return nil
}

func (n *countingNode) count() { n.calls.Add(1) }
func (n *countingNode) Start(ctx context.Context, s ReplicaSpec) (Started, error) {
	n.count()
	return n.Node.Start(ctx, s)
}
func (n *countingNode) Freeze(ctx context.Context, id string) (int64, error) {
	n.count()
	return n.Node.Freeze(ctx, id)
}
func (n *countingNode) Thaw(ctx context.Context, id string) error {
	n.count()
	return n.Node.Thaw(ctx, id)
}
func (n *countingNode) Drain(ctx context.Context, id string, g time.Duration) error {
	n.count()
	if err := n.muted(); err != nil {
		return err
	}
	return n.Node.Drain(ctx, id, g)
}
func (n *countingNode) Stop(ctx context.Context, id string, g time.Duration) error {
	n.count()
	if err := n.muted(); err != nil {
		return err
	}
	return n.Node.Stop(ctx, id, g)
}
func (n *countingNode) Wait(ctx context.Context, id string) (ExitStatus, error) {
	n.count()
	return n.Node.Wait(ctx, id)
}
func (n *countingNode) Check(ctx context.Context, id, addr string, h manifest.Health) error {
	n.count()
	if err := n.muted(); err != nil {
		return err
	}
	return n.Node.Check(ctx, id, addr, h)
}
func (n *countingNode) Remove(ctx context.Context, id string) error {
	n.count()
	if err := n.muted(); err != nil {
		return err
	}
	return n.Node.Remove(ctx, id)
}
func (n *countingNode) TailLog(ctx context.Context, id, log string, lines int) (LogTail, error) {
	if err := n.muted(); err != nil {
		return LogTail{}, err
	}
	return n.Node.(node.LogTailer).TailLog(ctx, id, log, lines)
}
func (n *countingNode) FollowLog(ctx context.Context, id, log string, c LogCursor) (LogTail, error) {
	if err := n.muted(); err != nil {
		return LogTail{}, err
	}
	return n.Node.(node.LogFollower).FollowLog(ctx, id, log, c)
}
func (n *countingNode) Adopt(ctx context.Context, k Known) (Adopted, error) {
	n.count()
	return n.Node.Adopt(ctx, k)
}
func (n *countingNode) Release(ctx context.Context, id string) error {
	n.count()
	return n.Node.Release(ctx, id)
}

// clusterHarness is a harness whose Manager is node n1 of a cluster of
// n1, n2 and n3; n2 and n3 are nodes on fake runtimes of their own.
type clusterHarness struct {
	*harness
	cl     *fakeCluster
	hub    *cluster.Hub
	remote map[string]*countingNode
}

// info is a live node of 4 CPUs and 4 GiB.
func info(name string) NodeInfo { return NodeInfo{Name: name, CPUs: 4, Memory: 4 << 30} }

func newClusterHarness(t *testing.T) *clusterHarness {
	t.Helper()
	ch := &clusterHarness{cl: &fakeCluster{ch: make(chan struct{}, 1), mch: make(chan struct{}, 1)},
		remote: map[string]*countingNode{}}
	ch.cl.nodes = []NodeInfo{info("n1"), info("n2"), info("n3")}
	ch.harness = newHarnessOpts(t, func(o *testOpts) {
		for _, name := range []string{"n2", "n3"} {
			rt, dir := newFakeRuntime(o.Clock), t.TempDir()
			n, err := localnode.New(localnode.Options{Runtime: rt, Network: fakeNet{},
				Placer: placement.NewCPUs(nil, nil), Images: fakeImages{}, Router: o.Router, Clock: o.Clock,
				Logger: slog.New(slog.DiscardHandler), Dir: dir})
			if err != nil {
				t.Fatal(err)
			}
			ch.remote[name] = &countingNode{rt: rt, dir: dir, Node: n}
		}
		ch.hub = cluster.NewHub(fakeMembers{ch.cl}, o.Clock, nil)
		o.Cluster = ch.hub
		o.Remote = func(n string) Node { return ch.remote[n] }
	})
	ch.hub.Register(ch.m)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { defer close(done); ch.hub.Run(ctx, ch.cl) }()
	t.Cleanup(func() { cancel(); <-done })
	return ch
}

// lead makes n1 the leader with a new term and waits until it runs the
// apps.
func (c *clusterHarness) lead() *fakeTerm {
	c.t.Helper()
	t := &fakeTerm{st: c.m.o.Store}
	c.cl.set(t, c.cl.nodes...)
	c.wait("n1 to lead", func() bool { _, err := c.m.leading(); return err == nil })
	return t
}

// on returns how many containers each node runs.
func (c *clusterHarness) on() map[string]int {
	return map[string]int{"n1": c.rt.count(), "n2": c.remote["n2"].rt.count(), "n3": c.remote["n3"].rt.count()}
}

// nodesOf returns the node of each of the app's replicas, from the store.
func (c *clusterHarness) nodesOf() map[string]string {
	c.t.Helper()
	kvs, err := c.m.o.Store.List(context.Background(), store.ReplicasPrefix("hello"))
	if err != nil {
		c.t.Fatal(err)
	}
	out := map[string]string{}
	for _, kv := range kvs {
		var rec replicaRecord
		if err := json.Unmarshal(kv.Value, &rec); err != nil {
			c.t.Fatal(err)
		}
		out[rec.ID] = rec.Node
	}
	return out
}

// endpointNodes returns the node each endpoint of the app's route names.
func (c *clusterHarness) endpointNodes() map[string]string {
	out := map[string]string{}
	for _, e := range c.r.route("hello").Endpoints {
		out[e.ID] = e.Node
	}
	return out
}

// placed waits until the store has n replica records of the app, each
// naming its node.
func (c *clusterHarness) placed(n int) {
	c.t.Helper()
	c.wait("records naming their nodes", func() bool {
		nodes := c.nodesOf()
		for _, node := range nodes {
			if node == "" {
				return false
			}
		}
		return len(nodes) == n
	})
}

// FetchState streams the area from the node's own StateSource, as the
// agent does over HTTP.
func (n *countingNode) FetchState(ctx context.Context, id, area, dst string) error {
	if err := n.muted(); err != nil {
		return err
	}
	pr, pw := io.Pipe()
	go func() { pw.CloseWithError(n.Node.(node.StateSource).SendState(ctx, id, area, pw)) }()
	_, err := statemerge.ReadTar(pr, dst, node.StateMax)
	pr.Close()
	return err
}
func (n *countingNode) DropState(ctx context.Context, id, area string) error {
	return n.Node.(node.StateSource).DropState(ctx, id, area)
}
