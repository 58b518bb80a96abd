package e2e

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"strings"
	"testing"
	"time"

	"github.com/shoal-run/shoal/internal/api/types"
	"github.com/shoal-run/shoal/internal/cluster/clustertest"
	"github.com/shoal-run/shoal/internal/mountinfo"
	"github.com/shoal-run/shoal/internal/userns"
)

// testCluster is a real cluster made by a test (clustertest): three etcd
// members (Debian's etcd, peers on loopback, clients on the test's bridge),
// and shoal daemons each in a network namespace of its own, joined to the
// bridge by a veth pair, on 10.213.<n>.0/24. Everything is removed when the
// test ends, failed or not.
type testCluster struct {
	*clustertest.Cluster
	t     *testing.T
	etcd  []*etcdMember
	nodes []*clusterNode
}

// etcdMember is one etcd member of a test's cluster.
type etcdMember struct {
	*clustertest.Member
	client string
}

func (m *etcdMember) kill() { m.Kill() }

// clusterNode is one shoal daemon of a test's cluster, in its own network
// namespace.
type clusterNode struct {
	*clustertest.Node
	c                       *testCluster
	name, ip, veth          string
	dataDir, runDir, cgroup string
}

func run(t *testing.T, args ...string) {
	t.Helper()
	if out, err := exec.Command(args[0], args[1:]...).CombinedOutput(); err != nil {
		t.Fatalf("%s: %v\n%s", strings.Join(args, " "), err, out)
	}
}

// startCluster makes the bridge, three etcd members and nodes shoal nodes,
// with no proxy on them.
func startCluster(t *testing.T, nodes int) *testCluster {
	return startClusterWith(t, nodes, false)
}

// startClusterWith is startCluster with each node's proxy on <ip>:8080 in
// its namespace when proxy is set, and args added to every node's flags.
func startClusterWith(t *testing.T, nodes int, proxy bool, args ...string) *testCluster {
	t.Helper()
	o := clustertest.Options{Shoal: shoalBin, Dir: t.TempDir(), Net: "10.213", Tag: "cl",
		CgroupPrefix: fmt.Sprintf("/shoal-e2e-cl%d", os.Getpid()), Proxy: proxy, Args: args}
	cl, err := clustertest.Start(context.Background(), o, nodes)
	c := &testCluster{Cluster: cl, t: t}
	if cl != nil {
		t.Cleanup(func() {
			if t.Failed() {
				c.logTails()
			}
			if err := cl.Close(); err != nil {
				t.Errorf("cluster cleanup: %v", err)
			}
			// A node killed and not started again leaves nothing either:
			// not the idmapped layers of its apps, outside its folders.
			for _, nd := range cl.Nodes {
				dir := userns.LayersDir(nd.DataDir)
				if mps, _ := mountinfo.MountsUnder(dir); len(mps) != 0 {
					t.Errorf("node %s left idmapped layers mounted: %v", nd.Name, mps)
					userns.RemoveLayers(dir)
				} else if _, err := os.Stat(dir); err == nil {
					t.Errorf("node %s left %s", nd.Name, dir)
					os.RemoveAll(dir)
				}
			}
		})
	}
	if err != nil {
		t.Fatal(err)
	}
	for _, m := range cl.Etcd {
		c.etcd = append(c.etcd, &etcdMember{Member: m, client: m.Client})
	}
	for _, nd := range cl.Nodes {
		c.nodes = append(c.nodes, &clusterNode{Node: nd, c: c, name: nd.Name, ip: nd.IP, veth: nd.Veth,
			dataDir: nd.DataDir, runDir: nd.RunDir, cgroup: nd.Cgroup})
	}
	return c
}

// logTails logs the end of every member's and node's log.
func (c *testCluster) logTails() {
	for _, m := range c.Etcd {
		c.t.Logf("etcd %s log (tail):\n%s", m.Name, clustertest.Tail(m.Log, 15))
	}
	for _, nd := range c.Nodes {
		c.t.Logf("node %s log (tail):\n%s", nd.Name, clustertest.Tail(nd.Log, 30))
	}
}

// start starts the node's daemon in its namespace and waits until it answers.
func (nd *clusterNode) start() {
	nd.c.t.Helper()
	if err := nd.Start(context.Background()); err != nil {
		nd.c.t.Fatal(err)
	}
}

// kill stops the node's daemon with SIGKILL.
func (nd *clusterNode) kill() { nd.Kill() }

func (nd *clusterNode) shoal(args ...string) result {
	nd.c.t.Helper()
	r, err := nd.Shoal(context.Background(), args...)
	if err != nil {
		nd.c.t.Fatal(err)
	}
	return result{r.Stdout, r.Stderr, r.Code}
}

// nodes lists the cluster's nodes as seen from nd, by name.
func (nd *clusterNode) nodes() (map[string]types.Node, error) {
	return nd.Nodes(context.Background())
}

// waitNodes polls nd's node list until cond holds, and returns how long
// that took.
func (nd *clusterNode) waitNodes(what string, cond func(map[string]types.Node) bool) time.Duration {
	t := nd.c.t
	t.Helper()
	start := time.Now()
	deadline := start.Add(60 * time.Second)
	var last map[string]types.Node
	var err error
	for {
		if last, err = nd.nodes(); err == nil && cond(last) {
			return time.Since(start)
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s: not after 60s; last node list from %s: %+v, %v", what, nd.name, last, err)
		}
		time.Sleep(50 * time.Millisecond)
	}
}
