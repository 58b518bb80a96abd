// Package cluster is the cluster benchmark suite: a real cluster on one
// host (three etcd members of Debian's etcd, three shoal daemons each in a
// network namespace of its own on a bridge the suite makes; package
// clustertest) whose nodes are killed as a machine dies (every process
// SIGKILLed, its link down), timed until the cluster notices and a new
// leader leads, beside the published defaults of Kubernetes and Nomad.
package cluster

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"time"

	"github.com/shoal-run/shoal/internal/api/types"
	"github.com/shoal-run/shoal/internal/bench"
	shcluster "github.com/shoal-run/shoal/internal/cluster"
	"github.com/shoal-run/shoal/internal/cluster/clustertest"
)

func init() {
	bench.Register(bench.Suite{Name: "cluster", Title: "Cluster: node death, failover and routing across nodes", Run: Cluster})
}

// The suite's bridge subnet (10.214.<n>.0/24), link names and cgroups,
// apart from the e2e tests' clusters (10.213) and the other suites.
const (
	benchNet     = "10.214"
	benchTag     = "bc"
	benchCgroups = "/shoal-bench-cluster"
	nodeCount    = 3
)

// env is the suite's running cluster.
type env struct {
	o bench.Options
	c *clustertest.Cluster
}

// Cluster runs the cluster suite.
func Cluster(ctx context.Context, o bench.Options) (_ *bench.Report, retErr error) {
	if o.ShoalBin == "" {
		return nil, fmt.Errorf("cluster: the shoal binary under test is required")
	}
	rep := bench.NewReport(ctx, "cluster", "Cluster: node death, failover and routing across nodes", o)
	dir, err := o.ScratchDir("cluster")
	if err != nil {
		return nil, err
	}
	defer os.RemoveAll(dir)
	e := &env{o: o}
	o.Logf("cluster: starting 3 etcd members and %d shoal nodes", nodeCount)
	c, err := clustertest.Start(ctx, clustertest.Options{Shoal: o.ShoalBin, Dir: filepath.Join(dir, "cluster"),
		Net: benchNet, Tag: benchTag, CgroupPrefix: benchCgroups, Proxy: true}, nodeCount)
	if err != nil {
		// The cluster cannot run here: every row says why.
		why := "cannot start the cluster: " + err.Error()
		renderDeath(rep, notRun(deathRows, why))
		rep.Heading("Healing and routing across nodes")
		renderHeal(rep, notRun([]string{rowHeal, rowHealDaemon}, why), nil)
		renderHop(rep, notRun([]string{rowLocal, rowHop}, why))
		return rep, e.placement(ctx, rep)
	}
	e = &env{o: o, c: c}
	defer func() {
		if err := c.Close(); err != nil && retErr == nil {
			retErr = fmt.Errorf("cluster: cleanup: %w", err)
		}
	}()
	if _, err := e.waitAll(ctx, c.Nodes[0], "all nodes ready with a leader", e.allReady); err != nil {
		return rep, fmt.Errorf("cluster: %w", err)
	}
	rep.Para("Every figure here comes from one run of a real cluster on this host: three etcd members (Debian's `etcd`, "+
		"peers on loopback) and %d `shoal daemon`s of the binary under test, each in a network namespace of its own joined "+
		"by a veth pair to a bridge the suite makes, with the default lease (`--node-ttl %s`). A node's death is a machine "+
		"dying: its link goes down and every process of the node (daemon, proxy, replicas) gets SIGKILL; after each run "+
		"the node comes back (link up, a new daemon on the same folders) and the next run waits until every node is ready "+
		"again. What the cluster sees is read from a surviving node's API (`GET /v1/nodes`, as `shoal node ls` shows it) "+
		"every %s.", nodeCount, shcluster.DefaultTTL, pollEvery)
	warmup, runs := 1, o.RunsOr(10, 2)
	if o.Quick {
		warmup = 0
	}
	rows, err := bench.Measure(ctx, o, warmup, runs, []bench.Subject{
		{Name: rowDown, Command: "ip link set <veth> down; kill -KILL <every process of a follower>; GET /v1/nodes on another node until it is down", Run: e.followerDeath},
		{Name: rowLeader, Command: "ip link set <veth> down; kill -KILL <every process of the leader>; GET /v1/nodes on another node until another leads", Run: e.leaderDeath},
	})
	if err != nil {
		return rep, fmt.Errorf("cluster: %w", err)
	}
	renderDeath(rep, rows)
	if err := e.acrossNodes(ctx, rep, dir); err != nil {
		return rep, err
	}
	return rep, e.placement(ctx, rep)
}

// acrossNodes measures and renders healing and the proxy hop; what cannot
// run says why in its rows.
func (e *env) acrossNodes(ctx context.Context, rep *bench.Report, dir string) error {
	rep.Heading("Healing and routing across nodes")
	if err := e.helloEverywhere(ctx, dir); err != nil {
		why := "the hello image on every node: " + err.Error()
		renderHeal(rep, notRun([]string{rowHeal, rowHealDaemon}, why), nil)
		renderHop(rep, notRun([]string{rowLocal, rowHop}, why))
		return ctx.Err()
	}
	rows, side, err := e.measureHeal(ctx, dir)
	if err != nil {
		return fmt.Errorf("cluster: %w", err)
	}
	renderHeal(rep, rows, side)
	rows, err = e.measureHop(ctx, dir)
	if ctx.Err() != nil {
		return ctx.Err()
	}
	if err != nil {
		rows = notRun([]string{rowLocal, rowHop}, err.Error())
	}
	renderHop(rep, rows)
	return nil
}

// placement measures and renders the placer, which needs no cluster.
func (e *env) placement(ctx context.Context, rep *bench.Report) error {
	rows, err := measurePlacement(ctx, e.o)
	if err != nil {
		return fmt.Errorf("cluster: %w", err)
	}
	renderPlacement(rep, rows)
	return nil
}

// pollEvery is how often the suite reads a node's view of the cluster.
const pollEvery = 10 * time.Millisecond

// allReady holds when every node of the cluster is listed ready and one
// leads.
func (e *env) allReady(m map[string]types.Node) bool {
	if len(m) != len(e.c.Nodes) || clustertest.Leader(m) == "" {
		return false
	}
	for _, nd := range e.c.Nodes {
		if m[nd.Name].State != shcluster.StateReady {
			return false
		}
	}
	return true
}

// waitAll polls nd's node list every pollEvery until ok holds, and returns
// the list that passed; it fails after a minute.
func (e *env) waitAll(ctx context.Context, nd *clustertest.Node, what string, ok func(map[string]types.Node) bool) (map[string]types.Node, error) {
	deadline := time.Now().Add(time.Minute)
	var last map[string]types.Node
	var err error
	for {
		if last, err = nd.Nodes(ctx); err == nil && ok(last) {
			return last, nil
		}
		if time.Now().After(deadline) {
			if err != nil {
				return nil, fmt.Errorf("%s: not after 1m; node list from %s: %w", what, nd.Name, err)
			}
			return nil, fmt.Errorf("%s: not after 1m; last node list from %s: %v", what, nd.Name, last)
		}
		select {
		case <-ctx.Done():
			return nil, ctx.Err()
		case <-time.After(pollEvery):
		}
	}
}

// notRun returns rows named names, each saying why it has no numbers.
func notRun(names []string, why string) []bench.Row {
	out := make([]bench.Row, len(names))
	for i, n := range names {
		out[i] = bench.Row{Name: n, Err: why}
	}
	return out
}
