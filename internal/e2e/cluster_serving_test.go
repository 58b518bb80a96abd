package e2e

import (
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/shoal-run/shoal/internal/api/types"
	"github.com/shoal-run/shoal/internal/cluster/clustertest"
)

// helloEverywhere builds the hello example on the first node and imports
// the same image (same digest) into the others.
func (c *testCluster) helloEverywhere() {
	t := c.t
	t.Helper()
	first := c.nodes[0]
	dir := filepath.Join(examples(t), "hello")
	if r := first.shoal("image", "build", dir, "--tag", "hello:1", "--entrypoint", "/hello", "--port", "8080"); r.code != 0 {
		t.Fatalf("image build on %s: %s", first.name, r.stderr)
	}
	layout := filepath.Join(t.TempDir(), "hello")
	out, err := exec.Command("skopeo", "copy", "oci:"+filepath.Join(first.dataDir, "images")+":hello:1", "oci:"+layout+":hello:1").CombinedOutput()
	if err != nil {
		t.Fatalf("skopeo copy of hello:1 out of %s: %v\n%s", first.name, err, out)
	}
	for _, nd := range c.nodes[1:] {
		if r := nd.shoal("image", "import", layout, "--tag", "hello:1"); r.code != 0 {
			t.Fatalf("image import on %s: %s", nd.name, r.stderr)
		}
	}
}

// leaderNode waits for a leader and returns it.
func (c *testCluster) leaderNode() *clusterNode {
	c.t.Helper()
	var name string
	c.nodes[0].waitNodes("a leader", func(ns map[string]types.Node) bool { name = clustertest.Leader(ns); return name != "" })
	for _, nd := range c.nodes {
		if nd.name == name {
			return nd
		}
	}
	c.t.Fatalf("leader %q is none of the test's nodes", name)
	return nil
}

// waitApp polls app's status on nd until cond holds (at most 90 s).
func (nd *clusterNode) waitApp(what, app string, cond func(types.App) bool) types.App {
	t := nd.c.t
	t.Helper()
	deadline := time.Now().Add(90 * time.Second)
	var a types.App
	var last string
	for {
		r := nd.shoal("app", "status", app, "--output", "json")
		last = r.stderr
		if r.code == 0 && json.Unmarshal([]byte(r.stdout), &a) == nil && cond(a) {
			return a
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s: not after 90s; last status from %s: %+v %s", what, nd.name, a.Replicas, last)
		}
		time.Sleep(200 * time.Millisecond)
	}
}

// readyByNode counts an app's ready replicas by node.
func readyByNode(a types.App) map[string]int {
	out := map[string]int{}
	for _, r := range a.Replicas {
		if r.State == "ready" {
			out[r.Node]++
		}
	}
	return out
}

// TestClusterServing: an app deployed through a follower gets its
// replicas spread across the nodes, run by the leader; a node
// killed with SIGKILL has its replica replaced on the others, and once
// restarted it removes the container it was left with.
func TestClusterServing(t *testing.T) {
	c := startCluster(t, 3)
	c.helloEverywhere()
	lead := c.leaderNode()
	manifest := "name = \"hello\"\nimage = \"hello:1\"\nport = 8080\n[scale]\nmin = 3\nmax = 3\n[health]\nhttp = \"/healthz\"\n"
	f := filepath.Join(t.TempDir(), "shoal.toml")
	if err := os.WriteFile(f, []byte(manifest), 0o644); err != nil {
		t.Fatal(err)
	}
	// Deployed through a follower, which sends it to the leader; a leader
	// just elected answers 503 until it has loaded the apps.
	var via *clusterNode
	for _, nd := range c.nodes {
		if nd != lead {
			via = nd
			break
		}
	}
	deadline := time.Now().Add(30 * time.Second)
	for {
		r := via.shoal("app", "deploy", "-f", f, "--detach")
		if r.code == 0 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("deploy through follower %s: exit %d: %s", via.name, r.code, r.stderr)
		}
		time.Sleep(200 * time.Millisecond)
	}
	a := lead.waitApp("3 ready replicas, one on each node", "hello", func(a types.App) bool {
		by := readyByNode(a)
		return by["n1"] == 1 && by["n2"] == 1 && by["n3"] == 1
	})
	// Every node shows the one app the leader runs.
	for _, nd := range c.nodes {
		r := nd.shoal("app", "ls", "--output", "json")
		var apps []types.App
		if r.code != 0 || json.Unmarshal([]byte(r.stdout), &apps) != nil || len(apps) != 1 || apps[0].Name != "hello" {
			t.Fatalf("app ls on %s: exit %d %s %s; want hello only", nd.name, r.code, r.stdout, r.stderr)
		}
	}

	// A follower holding a replica is killed.
	var victim *clusterNode
	for _, nd := range c.nodes {
		if nd != lead {
			victim = nd
			break
		}
	}
	var lostID string
	var lostPid int
	for _, r := range a.Replicas {
		if r.Node == victim.name {
			lostID, lostPid = r.ID, r.Pid
		}
	}
	if lostPid == 0 {
		t.Fatalf("no pid for %s's replica: %+v", victim.name, a.Replicas)
	}
	victim.kill()
	killed := time.Now()
	a = lead.waitApp("the lost node's replica replaced on the others", "hello", func(a types.App) bool {
		by := readyByNode(a)
		if by[victim.name] != 0 || len(a.Replicas) != 3 {
			return false
		}
		return by["n1"]+by["n2"]+by["n3"] == 3
	})
	t.Logf("%s killed; its replica %s replaced in %s: %+v", victim.name, lostID, time.Since(killed).Round(time.Millisecond), readyByNode(a))
	for _, r := range a.Replicas {
		if r.ID == lostID {
			t.Fatalf("replica %s of the lost node still listed: %+v", lostID, a.Replicas)
		}
	}
	if _, err := os.Stat("/proc/" + strconv.Itoa(lostPid)); err != nil {
		t.Fatalf("the lost node's replica process %d is gone while its daemon is dead: %v (nothing may be called on a lost node)", lostPid, err)
	}
	evs := lead.shoal("events", "--app", "hello")
	// Lost when its lease expired, or, when its checks found it first, as
	// a node that does not answer.
	if evs.code != 0 || !containsAll(evs.stdout, "lost", lostID, fmt.Sprintf("node %s ", victim.name)) {
		t.Fatalf("events on the leader lack the lost replica %s:\n%s%s", lostID, evs.stdout, evs.stderr)
	}

	// Back, the node removes the container whose replica was replaced.
	victim.start()
	deadline = time.Now().Add(60 * time.Second)
	for {
		if _, err := os.Stat("/proc/" + strconv.Itoa(lostPid)); err != nil {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("replica process %d of %s still runs 60s after its node came back", lostPid, lostID)
		}
		time.Sleep(100 * time.Millisecond)
	}
	a = lead.waitApp("still 3 ready replicas", "hello", func(a types.App) bool { return replicasIn(a, "ready") == 3 })
	if len(a.Replicas) != 3 {
		t.Fatalf("replicas after the node came back: %+v; want 3", a.Replicas)
	}
	if r := lead.shoal("app", "rm", "hello"); r.code != 0 {
		t.Fatalf("app rm: %s", r.stderr)
	}
}

// containsAll reports whether s contains every one of subs.
func containsAll(s string, subs ...string) bool {
	for _, sub := range subs {
		if !strings.Contains(s, sub) {
			return false
		}
	}
	return true
}

// TestClusterServingLeaderKilled: when the leader is killed with SIGKILL,
// the next leader adopts the replicas on the live nodes where they run and
// replaces the dead leader's; no record is lost.
func TestClusterServingLeaderKilled(t *testing.T) {
	c := startCluster(t, 3)
	c.helloEverywhere()
	lead := c.leaderNode()
	manifest := "name = \"hello\"\nimage = \"hello:1\"\nport = 8080\n[scale]\nmin = 3\nmax = 3\n[health]\nhttp = \"/healthz\"\n"
	f := filepath.Join(t.TempDir(), "shoal.toml")
	if err := os.WriteFile(f, []byte(manifest), 0o644); err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(30 * time.Second)
	for r := lead.shoal("app", "deploy", "-f", f, "--detach"); r.code != 0; r = lead.shoal("app", "deploy", "-f", f, "--detach") {
		if time.Now().After(deadline) {
			t.Fatalf("deploy through the leader %s: %s", lead.name, r.stderr)
		}
		time.Sleep(200 * time.Millisecond)
	}
	before := lead.waitApp("3 ready replicas, one on each node", "hello", func(a types.App) bool {
		by := readyByNode(a)
		return by["n1"] == 1 && by["n2"] == 1 && by["n3"] == 1
	})
	kept := map[string]string{} // the replicas of the nodes that live on
	for _, r := range before.Replicas {
		if r.Node != lead.name {
			kept[r.ID] = r.Node
		}
	}
	lead.kill()
	var next *clusterNode
	for _, nd := range c.nodes {
		if nd != lead {
			next = nd
			break
		}
	}
	a := next.waitApp("the dead leader's replica replaced, the others adopted", "hello", func(a types.App) bool {
		by := readyByNode(a)
		return by[lead.name] == 0 && replicasIn(a, "ready") == 3 && len(a.Replicas) == 3
	})
	for id, node := range kept {
		found := false
		for _, r := range a.Replicas {
			found = found || (r.ID == id && r.Node == node)
		}
		if !found {
			t.Fatalf("replica %s on %s was not adopted by the new leader: %+v", id, node, a.Replicas)
		}
	}
	if a.Revision != before.Revision || a.Min != 3 {
		t.Fatalf("app after the leader's death: revision %d, min %d; want %d, 3", a.Revision, a.Min, before.Revision)
	}
}
