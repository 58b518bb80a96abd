package e2e

import (
	"context"
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"testing"
	"time"

	"github.com/shoal-run/shoal/internal/api/types"
	"github.com/shoal-run/shoal/internal/cluster/clustertest"
)

// healCluster is a three-node cluster with proxies and the hello image on
// every node (built on the first, the same image imported into the others).
func healCluster(t *testing.T) *testCluster {
	t.Helper()
	c := startClusterWith(t, 3, true)
	first := c.nodes[0]
	if r := first.shoal("image", "build", filepath.Join(examples(t), "hello"), "--tag", "hello:1", "--entrypoint", "/hello", "--port", "8080"); r.code != 0 {
		t.Fatalf("image build on %s: %s", first.name, r.stderr)
	}
	layout := filepath.Join(t.TempDir(), "hello")
	if out, err := exec.Command("skopeo", "copy", "oci:"+filepath.Join(first.dataDir, "images")+":hello:1", "oci:"+layout+":hello:1").CombinedOutput(); err != nil {
		t.Fatalf("skopeo copy of hello:1 out of %s: %v\n%s", first.name, err, out)
	}
	for _, nd := range c.nodes[1:] {
		if r := nd.shoal("image", "import", layout, "--tag", "hello:1"); r.code != 0 {
			t.Fatalf("image import on %s: %s", nd.name, r.stderr)
		}
	}
	return c
}

// roles waits until every node is ready with a leader and returns the
// leader and the followers.
func (c *testCluster) roles() (*clusterNode, []*clusterNode) {
	c.t.Helper()
	var leader string
	c.nodes[0].waitNodes("all ready with a leader", func(m map[string]types.Node) bool {
		leader = clustertest.Leader(m)
		if leader == "" || len(m) != len(c.nodes) {
			return false
		}
		for _, n := range m {
			if n.State != "ready" {
				return false
			}
		}
		return true
	})
	var l *clusterNode
	var fs []*clusterNode
	for _, nd := range c.nodes {
		if nd.name == leader {
			l = nd
		} else {
			fs = append(fs, nd)
		}
	}
	return l, fs
}

// deployApp deploys app (the manifest after its name) through nd.
func (nd *clusterNode) deployApp(app, manifest string) {
	t := nd.c.t
	t.Helper()
	f := filepath.Join(t.TempDir(), app+".toml")
	if err := os.WriteFile(f, []byte("name = \""+app+"\"\n"+manifest), 0o644); err != nil {
		t.Fatal(err)
	}
	if r := nd.shoal("app", "deploy", "-f", f, "--detach"); r.code != 0 {
		t.Fatalf("deploy %s through %s: %s", app, nd.name, r.stderr)
	}
}

// appOn polls app's status on nd until cond holds (at most 90 s).
func (nd *clusterNode) appOn(what, app string, cond func(types.App) bool) types.App {
	t := nd.c.t
	t.Helper()
	deadline := time.Now().Add(90 * time.Second)
	var a types.App
	var err error
	for {
		if err = nd.GetJSON(context.Background(), "/v1/apps/"+app, &a); err == nil && cond(a) {
			return a
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s: not after 90s; last status of %s from %s: %+v, %v", what, app, nd.name, a.Replicas, err)
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// readyNodes returns the nodes of app's ready replicas, one entry a
// replica, sorted.
func readyNodes(a types.App) []string {
	var out []string
	for _, r := range a.Replicas {
		if r.State == "ready" {
			out = append(out, r.Node)
		}
	}
	slices.Sort(out)
	return out
}

const healManifest = "image = \"hello:1\"\nport = 8080\n[health]\nhttp = \"/healthz\"\n"

// TestClusterHeal: a follower that holds a replica loses power (every
// process of it SIGKILLed, its link down). Its replica is replaced on a
// live node and the replacement answers through a third node's proxy,
// while requests through that proxy to an app whose replica runs on a
// surviving node all succeed.
func TestClusterHeal(t *testing.T) {
	c := healCluster(t)
	leader, fs := c.roles()
	victim, front := fs[0], fs[1]
	// heal runs on the victim and the leader; steady on the leader only;
	// the front node holds neither, so its proxy forwards every request.
	leader.deployApp("heal", healManifest+"[scale]\nmin = 2\nmax = 2\n[placement]\nnodes = [\""+victim.name+"\", \""+leader.name+"\"]\n")
	leader.deployApp("steady", healManifest+"[scale]\nmin = 1\nmax = 1\n[placement]\nnodes = [\""+leader.name+"\"]\n")
	want := []string{leader.name, victim.name}
	slices.Sort(want)
	a := leader.appOn("heal ready on "+victim.name+" and "+leader.name, "heal", func(a types.App) bool {
		return slices.Equal(readyNodes(a), want) && len(a.Replicas) == 2
	})
	leader.appOn("steady ready on "+leader.name, "steady", func(a types.App) bool {
		return slices.Equal(readyNodes(a), []string{leader.name})
	})
	old := map[string]bool{}
	for _, r := range a.Replicas {
		old[r.ID] = true
	}
	ctx := context.Background()
	steady, err := clustertest.StartLoop(ctx, front.Node, "steady")
	if err != nil {
		t.Fatal(err)
	}
	defer steady.End()
	heal, err := clustertest.StartLoop(ctx, front.Node, "heal")
	if err != nil {
		t.Fatal(err)
	}
	defer heal.End()
	for id := range old {
		if _, err := heal.WaitAnswer(ctx, 30*time.Second, "heal's replica "+id+" through "+front.name, func(r string) bool { return r == id }); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := steady.WaitAnswer(ctx, 30*time.Second, "steady through "+front.name, func(r string) bool { return r != "" }); err != nil {
		t.Fatal(err)
	}

	t0 := time.Now()
	if err := victim.PowerOff(); err != nil {
		t.Fatal(err)
	}
	at, err := heal.WaitAnswer(ctx, 60*time.Second, "heal's replacement through "+front.name, func(r string) bool { return r != "" && !old[r] })
	if err != nil {
		t.Fatal(err)
	}
	time.Sleep(time.Second)
	steady.End()
	heal.End()
	total, failed, first := steady.Counts()
	if total == 0 || failed != 0 {
		t.Fatalf("steady through %s while %s died: %d of %d requests failed (first: %s); want none", front.name, victim.name, failed, total, first)
	}
	ht, hf, hfirst := heal.Counts()
	t.Logf("heal: a replacement answered through %s %s after the power-off; %d of %d requests to heal failed meanwhile (first: %q); steady: %d requests, none failed",
		front.name, at.Sub(t0), hf, ht, hfirst, total)
	a = leader.appOn("heal's 2 replicas ready on "+leader.name, "heal", func(a types.App) bool {
		return slices.Equal(readyNodes(a), []string{leader.name, leader.name}) && len(a.Replicas) == 2
	})
	for _, r := range a.Replicas {
		if old[r.ID] && r.Node == victim.name {
			t.Fatalf("the dead node's replica %s is still listed: %+v", r.ID, a.Replicas)
		}
	}
	if err := victim.PowerOn(ctx); err != nil {
		t.Fatal(err)
	}
	c.roles()
}

// TestClusterLeaderLoss: the leader loses power while it runs apps; the
// next leader lists every app, and every replica record on a surviving
// node keeps its ID (adopted, not replaced), while the dead leader's are
// replaced.
func TestClusterLeaderLoss(t *testing.T) {
	c := healCluster(t)
	leader, _ := c.roles()
	leader.deployApp("one", healManifest+"[scale]\nmin = 3\nmax = 3\n")
	leader.deployApp("two", healManifest+"[scale]\nmin = 1\nmax = 1\n")
	before := map[string]types.App{}
	for _, app := range []string{"one", "two"} {
		n := map[string]int{"one": 3, "two": 1}[app]
		before[app] = leader.appOn(app+" ready", app, func(a types.App) bool { return len(readyNodes(a)) == n && len(a.Replicas) == n })
	}
	if err := leader.PowerOff(); err != nil {
		t.Fatal(err)
	}
	var next *clusterNode
	for _, nd := range c.nodes {
		if nd != leader {
			next = nd
			break
		}
	}
	var newLeader string
	next.waitNodes("another leader", func(m map[string]types.Node) bool {
		newLeader = clustertest.Leader(m)
		return newLeader != "" && newLeader != leader.name
	})
	var nl *clusterNode
	for _, nd := range c.nodes {
		if nd.name == newLeader {
			nl = nd
		}
	}
	var apps []types.App
	deadline := time.Now().Add(60 * time.Second)
	for {
		r := nl.shoal("app", "ls", "-o", "json")
		if r.code == 0 && json.Unmarshal([]byte(r.stdout), &apps) == nil && len(apps) == 2 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("app ls on the new leader %s: exit %d %s %s; want one and two", nl.name, r.code, r.stdout, r.stderr)
		}
		time.Sleep(100 * time.Millisecond)
	}
	for _, app := range []string{"one", "two"} {
		n := len(before[app].Replicas)
		a := nl.appOn(app+" whole again on the live nodes", app, func(a types.App) bool {
			return len(readyNodes(a)) == n && len(a.Replicas) == n && !slices.Contains(readyNodes(a), leader.name)
		})
		ids := map[string]bool{}
		for _, r := range a.Replicas {
			ids[r.ID] = true
		}
		for _, r := range before[app].Replicas {
			if r.Node != leader.name && !ids[r.ID] {
				t.Fatalf("app %s: replica %s on the surviving node %s was lost with the leader: before %+v, after %+v", app, r.ID, r.Node, before[app].Replicas, a.Replicas)
			}
		}
	}
	if err := leader.PowerOn(context.Background()); err != nil {
		t.Fatal(err)
	}
	c.roles()
}

// TestClusterDrain: a drained node takes no new replica, and its replicas
// move to the other nodes.
func TestClusterDrain(t *testing.T) {
	c := healCluster(t)
	leader, fs := c.roles()
	drained, front := fs[0], fs[1]
	leader.deployApp("moving", healManifest+"[scale]\nmin = 2\nmax = 2\n[placement]\nnodes = [\""+drained.name+"\", \""+leader.name+"\"]\n")
	want := []string{leader.name, drained.name}
	slices.Sort(want)
	leader.appOn("moving ready on "+drained.name+" and "+leader.name, "moving", func(a types.App) bool {
		return slices.Equal(readyNodes(a), want) && len(a.Replicas) == 2
	})
	// Requests through the third node's proxy reach both replicas by hop,
	// and none fails while the drained node's replica moves.
	ctx := context.Background()
	load, err := clustertest.StartLoop(ctx, front.Node, "moving")
	if err != nil {
		t.Fatal(err)
	}
	defer load.End()
	if _, err := load.WaitAnswer(ctx, 30*time.Second, "moving through "+front.name, func(r string) bool { return r != "" }); err != nil {
		t.Fatal(err)
	}
	if r := front.shoal("node", "drain", drained.name); r.code != 0 {
		t.Fatalf("node drain %s: %s", drained.name, r.stderr)
	}
	leader.appOn("moving's replicas off "+drained.name, "moving", func(a types.App) bool {
		return slices.Equal(readyNodes(a), []string{leader.name, leader.name}) && len(a.Replicas) == 2
	})
	// The drained replica is stopped by now; requests go on a while after.
	time.Sleep(time.Second)
	load.End()
	if total, failed, first := load.Counts(); total == 0 || failed != 0 {
		t.Fatalf("moving through %s while %s drained: %d of %d requests failed (first: %s); want none", front.name, drained.name, failed, total, first)
	} else {
		t.Logf("moving through %s while %s drained: %d requests, none failed", front.name, drained.name, total)
	}
	// A new app spreads over the nodes that take work: none on the drained one.
	leader.deployApp("fresh", healManifest+"[scale]\nmin = 3\nmax = 3\n")
	a := leader.appOn("fresh ready", "fresh", func(a types.App) bool { return len(readyNodes(a)) == 3 && len(a.Replicas) == 3 })
	if on := readyNodes(a); slices.Contains(on, drained.name) {
		t.Fatalf("fresh has a replica on the drained node %s: %v", drained.name, on)
	}
}
