package e2e

import (
	"context"
	"errors"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/shoal-run/shoal/internal/api/types"
	"github.com/shoal-run/shoal/internal/cluster"
	"github.com/shoal-run/shoal/internal/cluster/clustertest"
	"github.com/shoal-run/shoal/internal/store"
)

func states(want map[string]string) func(map[string]types.Node) bool {
	return func(nodes map[string]types.Node) bool {
		if len(nodes) != len(want) {
			return false
		}
		for name, st := range want {
			if nodes[name].State != st {
				return false
			}
		}
		return true
	}
}

// TestCluster runs three etcd members and three shoal nodes, each node in a
// network namespace of its own, and walks the cluster through a node killed,
// a node cut off, an etcd member lost, the leader killed, drain and remove.
func TestCluster(t *testing.T) {
	c := startCluster(t, 3)
	n1, n2 := c.nodes[0], c.nodes[1]
	ready := map[string]string{"n1": cluster.StateReady, "n2": cluster.StateReady, "n3": cluster.StateReady}

	// Every node sees all three ready, one leader among them, and each
	// node's record carries its address and capacity.
	for _, nd := range c.nodes {
		nd.waitNodes("all ready, one leader", func(m map[string]types.Node) bool {
			return states(ready)(m) && clustertest.Leader(m) != ""
		})
	}
	nodes, err := n1.nodes()
	if err != nil {
		t.Fatal(err)
	}
	for _, nd := range c.nodes {
		if got := nodes[nd.name]; got.Addr != nd.ip+":7070" || got.CPUs < 1 || got.Memory <= 0 || got.FrozenMemory <= 0 {
			t.Fatalf("node %s listed as %+v; want addr %s:7070 and its capacity", nd.name, got, nd.ip)
		}
	}
	if out := n2.shoal("info").stdout; !strings.Contains(out, "cluster: node n2 ("+n2.ip+":7070)") {
		t.Fatalf("info of n2 does not name its membership:\n%s", out)
	}
	if out := n1.shoal("node", "ls").stdout; !strings.Contains(out, "LEADER") || !strings.Contains(out, n2.ip+":7070") {
		t.Fatalf("node ls table:\n%s", out)
	}

	// A follower killed with SIGKILL shows down once its lease expires, and
	// is ready again after a restart; measured three times.
	follower := func() *clusterNode {
		m, err := n1.nodes()
		if err != nil {
			t.Fatal(err)
		}
		for _, nd := range slices.Backward(c.nodes) {
			if !m[nd.name].Leader {
				return nd
			}
		}
		t.Fatal("no follower")
		return nil
	}
	var downs []time.Duration
	for range 3 {
		f := follower()
		watcher := c.nodes[0]
		if watcher == f {
			watcher = c.nodes[1]
		}
		f.kill()
		want := maps(ready, f.name, cluster.StateDown)
		downs = append(downs, watcher.waitNodes(f.name+" down after SIGKILL", states(want)))
		f.start()
		watcher.waitNodes(f.name+" ready after restart", states(ready))
	}
	slices.Sort(downs)
	t.Logf("SIGKILL to node down (TTL %s), seen by node ls polled every 50ms: %v, median %v",
		cluster.DefaultTTL, downs, downs[len(downs)/2])

	// A follower whose network is cut is down once its lease expires, and
	// ready again when the network is back.
	f := follower()
	watcher := n1
	if watcher == f {
		watcher = n2
	}
	run(t, "ip", "link", "set", f.veth, "down")
	cut := watcher.waitNodes(f.name+" down with its network cut", states(maps(ready, f.name, cluster.StateDown)))
	t.Logf("network cut to node down: %v", cut)
	run(t, "ip", "link", "set", f.veth, "up")
	watcher.waitNodes(f.name+" ready with its network back", states(ready))

	// One etcd member killed: quorum holds, the nodes stay ready, and a
	// write (a drain) still goes through. No node's heartbeat lapses: each
	// keeps the lease it had before, through what follows (longer than a
	// TTL: the leader's lease has to expire).
	st, err := store.OpenEtcd(context.Background(), []string{"http://" + c.etcd[0].client, "http://" + c.etcd[1].client})
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	leases := aliveLeases(t, st)
	if len(leases) != 3 || leases["n1"] == 0 || leases["n2"] == 0 || leases["n3"] == 0 {
		t.Fatalf("heartbeat leases %v; want one for each of n1, n2, n3", leases)
	}
	c.etcd[2].kill()
	if r := n1.shoal("node", "drain", "n3"); r.code != 0 {
		t.Fatalf("drain with one etcd member down: exit %d: %s", r.code, r.stderr)
	}
	n1.waitNodes("n3 draining with one etcd member down", states(maps(ready, "n3", cluster.StateDraining)))

	// The leader killed: another node leads, and a write fenced by the old
	// leader's term is refused by etcd.
	m, err := n1.nodes()
	if err != nil {
		t.Fatal(err)
	}
	old := clustertest.Leader(m)
	kvs, err := st.List(context.Background(), store.LeaderPrefix)
	if err != nil || len(kvs) == 0 {
		t.Fatalf("election keys: %v, %v", kvs, err)
	}
	first := kvs[0]
	for _, kv := range kvs {
		if kv.CreateRev < first.CreateRev {
			first = kv
		}
	}
	if string(first.Value) != old {
		t.Fatalf("oldest election key %s names %q; node ls says %q leads", first.Key, first.Value, old)
	}
	term := cluster.NewTerm(st.Client(), first.Key, first.CreateRev)
	if _, err := term.Put(context.Background(), store.Root+"e2e/fenced", []byte(old)); err != nil {
		t.Fatalf("fenced write while %s leads: %v", old, err)
	}
	var oldNode, other *clusterNode
	for _, nd := range c.nodes {
		switch {
		case nd.name == old:
			oldNode = nd
		case other == nil:
			other = nd
		}
	}
	oldNode.kill()
	took := other.waitNodes("a new leader after "+old+" was killed", func(m map[string]types.Node) bool {
		l := clustertest.Leader(m)
		return l != "" && l != old && m[old].State == cluster.StateDown
	})
	t.Logf("leader SIGKILL to new leader: %v", took)
	_, err = term.Put(context.Background(), store.Root+"e2e/fenced", []byte(old+" again"))
	if !errors.Is(err, cluster.ErrDeposed) {
		t.Fatalf("fenced write of the deposed leader %s: %v; want refused", old, err)
	}
	after := aliveLeases(t, st)
	for name, lease := range leases {
		if name != old && after[name] != lease {
			t.Fatalf("node %s: heartbeat lease %d before the etcd member was killed, %d after; want kept", name, lease, after[name])
		}
	}

	// Remove: a ready node is refused (409, named); a draining or down one
	// goes.
	var readyNode string
	m, _ = other.nodes()
	for name, n := range m {
		if n.State == cluster.StateReady {
			readyNode = name
		}
	}
	r := other.shoal("node", "rm", readyNode)
	if r.code == 0 || !strings.Contains(r.stderr, `"`+readyNode+`" is ready`) {
		t.Fatalf("rm of ready node %s: exit %d: %s; want refused naming it", readyNode, r.code, r.stderr)
	}
	for _, name := range slices.Compact([]string{old, "n3"}) {
		if m[name].State == cluster.StateReady {
			continue
		}
		if r := other.shoal("node", "rm", name); r.code != 0 {
			t.Fatalf("rm of %s node %s: exit %d: %s", m[name].State, name, r.code, r.stderr)
		}
		other.waitNodes(name+" removed", func(m map[string]types.Node) bool { _, ok := m[name]; return !ok })
	}
}

// TestNodeSingleHost: a daemon on bolt has no nodes, and says so.
func TestNodeSingleHost(t *testing.T) {
	d := startDaemon(t)
	for _, args := range [][]string{{"node", "ls"}, {"node", "drain", "n1"}, {"node", "rm", "n1"}} {
		r := d.shoal(args...)
		if r.code == 0 || !strings.Contains(r.stderr, "single-host") {
			t.Errorf("shoal %v on bolt: exit %d, stderr %q; want refused as single-host", args, r.code, r.stderr)
		}
	}
}

// aliveLeases returns the lease of each node's heartbeat key.
func aliveLeases(t *testing.T, st store.Store) map[string]store.LeaseID {
	t.Helper()
	kvs, err := st.List(context.Background(), store.AlivePrefix)
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]store.LeaseID{}
	for _, kv := range kvs {
		out[strings.TrimPrefix(kv.Key, store.AlivePrefix)] = kv.Lease
	}
	return out
}

// maps returns a copy of m with key set to v.
func maps(m map[string]string, key, v string) map[string]string {
	out := map[string]string{}
	for k, x := range m {
		out[k] = x
	}
	out[key] = v
	return out
}
