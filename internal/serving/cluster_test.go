package serving

import (
	"context"
	"encoding/json"
	"errors"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/shoal-run/shoal/internal/api/types"
	"github.com/shoal-run/shoal/internal/cluster"
	"github.com/shoal-run/shoal/internal/errdefs"
	"github.com/shoal-run/shoal/internal/labels"
	"github.com/shoal-run/shoal/internal/runtime"
	"github.com/shoal-run/shoal/internal/store"
)

// TestClusterLeaderOnly: a node of a cluster runs no app while it follows;
// elected, it places an app's replicas across the nodes, one per node;
// deposed, its controllers stop and every replica runs on; elected again,
// it adopts them through the node each record names.
func TestClusterLeaderOnly(t *testing.T) {
	h := newClusterHarness(t)
	ctx := context.Background()
	m := "name = \"hello\"\nimage = \"hello:1\"\nport = 1\n"
	if _, err := h.m.Deploy(ctx, types.DeployRequest{Manifest: m}); !errors.Is(err, errdefs.ErrUnavailable) {
		t.Fatalf("deploy on a follower: %v; want unavailable", err)
	}
	if _, err := h.m.List(ctx); !errors.Is(err, errdefs.ErrUnavailable) {
		t.Fatalf("list on a follower: %v; want unavailable", err)
	}
	if _, err := h.m.Get(ctx, "hello"); !errors.Is(err, errdefs.ErrUnavailable) || !strings.Contains(err.Error(), "does not lead") {
		t.Fatalf("get on a follower: %v; want unavailable, not leading", err)
	}
	h.lead()
	h.deploy("min = 3\nmax = 3")
	// A replica is listed ready under the app's lock, and routed once it
	// is released.
	h.wait("3 ready replicas, routed", func() bool { return len(h.replicas()["ready"]) == 3 && len(h.endpointNodes()) == 3 })
	h.placed(3)
	if on := h.on(); on["n1"] != 1 || on["n2"] != 1 || on["n3"] != 1 {
		t.Fatalf("containers by node %v; want one on each", on)
	}
	nodes := h.nodesOf()
	eps := h.endpointNodes()
	seen := map[string]bool{}
	for id, n := range nodes {
		seen[n] = true
		if eps[id] != n {
			t.Errorf("replica %s: endpoint names node %q, its record %q", id, eps[id], n)
		}
	}
	if len(seen) != 3 || len(eps) != 3 {
		t.Fatalf("records name nodes %v, endpoints %v; want 3 replicas on 3 nodes", nodes, eps)
	}
	a, err := h.m.Get(ctx, "hello")
	if err != nil {
		t.Fatal(err)
	}
	for _, r := range a.Replicas {
		if r.Node != nodes[r.ID] {
			t.Errorf("replica %s: the API says node %q, its record %q", r.ID, r.Node, nodes[r.ID])
		}
		// A remote replica's log is kept under its own node's apps folder.
		if rn := h.remote[r.Node]; rn != nil {
			c, err := rn.rt.get(r.ID)
			if err != nil {
				t.Fatalf("replica %s on %s: %v", r.ID, r.Node, err)
			}
			if !strings.HasPrefix(c.stdout, rn.dir+"/hello/logs/") {
				t.Errorf("replica %s on %s: log %q; want it under %s", r.ID, r.Node, c.stdout, rn.dir)
			}
		}
	}

	// Deposed: the controllers stop; no replica is touched.
	calls := h.remote["n2"].calls.Load()
	h.cl.set(nil, h.cl.nodes...)
	h.wait("n1 to step down", func() bool { _, err := h.m.leading(); return err != nil })
	if _, err := h.m.Get(ctx, "hello"); !errors.Is(err, errdefs.ErrUnavailable) {
		t.Fatalf("get after stepping down: %v; want unavailable", err)
	}
	h.clock.Advance(time.Hour) // a controller left running would freeze or stop them
	time.Sleep(20 * time.Millisecond)
	if on := h.on(); on["n1"] != 1 || on["n2"] != 1 || on["n3"] != 1 {
		t.Fatalf("containers by node after stepping down %v; want one on each still", on)
	}
	if got := h.nodesOf(); len(got) != 3 {
		t.Fatalf("records after stepping down %v; want the 3", got)
	}

	// Elected again: the replicas are adopted on their nodes, none new.
	h.lead()
	h.wait("3 adopted replicas ready", func() bool { return len(h.replicas()["ready"]) == 3 })
	if on := h.on(); on["n1"] != 1 || on["n2"] != 1 || on["n3"] != 1 {
		t.Fatalf("containers by node after adoption %v; want the same one on each", on)
	}
	if h.remote["n2"].calls.Load() == calls {
		t.Fatal("n2 was not asked to adopt its replica")
	}
	if got := h.nodesOf(); !maps.Equal(got, nodes) {
		t.Fatalf("records after adoption %v; want %v", got, nodes)
	}
}

// TestClusterDeposedWriteStepsDown: a write refused because the term is
// over makes the node step down at once, and it does not lead again under
// that term; a new term leads.
func TestClusterDeposedWriteStepsDown(t *testing.T) {
	h := newClusterHarness(t)
	term := h.lead()
	h.deploy("min = 1\nmax = 2")
	h.wait("a ready replica", func() bool { return len(h.replicas()["ready"]) == 1 })
	term.over.Store(true)
	two := 2
	_, err := h.m.Scale(context.Background(), "hello", types.ScaleRequest{Max: &two})
	if !errdefs.IsConflict(err) {
		t.Fatalf("scale by a deposed leader: %v; want a conflict", err)
	}
	h.wait("n1 to step down", func() bool { _, err := h.m.leading(); return err != nil })
	if h.cl.Leading() != cluster.Term(term) {
		t.Fatal("the test's cluster moved on")
	}
	poke(h.cl.ch)
	time.Sleep(20 * time.Millisecond)
	if _, err := h.m.leading(); err == nil {
		t.Fatal("n1 leads again under the term whose write was refused")
	}
	h.lead()
	h.wait("the replica adopted by the new term", func() bool { return len(h.replicas()["ready"]) == 1 })
}

// TestClusterHealsLostNode: when a node leaves the live set its replica
// leaves the route at once and is replaced on a live node; nothing is
// called on the lost node.
func TestClusterHealsLostNode(t *testing.T) {
	h := newClusterHarness(t)
	term := h.lead()
	h.deploy("min = 3\nmax = 3")
	h.wait("3 ready replicas", func() bool { return len(h.replicas()["ready"]) == 3 })
	h.placed(3)
	var lost string
	for id, n := range h.nodesOf() {
		if n == "n3" {
			lost = id
		}
	}
	calls := h.remote["n3"].calls.Load()
	h.cl.set(term, info("n1"), info("n2"))
	h.wait("n3's replica out of the route", func() bool { _, ok := h.endpointNodes()[lost]; return !ok })
	h.wait("its replacement ready", func() bool {
		a := h.replicas()
		return len(a["ready"]) == 3 && !h.m.app("hello").has(lost)
	})
	on := h.on()
	if on["n1"]+on["n2"] != 3 || on["n1"] == 0 || on["n2"] == 0 {
		t.Fatalf("containers by node %v; want 3 on n1 and n2, both used", on)
	}
	if on["n3"] != 1 {
		t.Fatalf("n3 runs %d containers; want its one left alone", on["n3"])
	}
	if got := h.remote["n3"].calls.Load(); got != calls {
		t.Fatalf("%d calls made to the lost node", got-calls)
	}
	// Records are written in the background.
	h.wait("3 records, none on the lost node", func() bool {
		nodes := h.nodesOf()
		for _, n := range nodes {
			if n == "n3" || n == "" {
				return false
			}
		}
		return len(nodes) == 3
	})
	h.wait("the lost event", func() bool { return len(h.ev.of("lost")) > 0 })
	if evs := h.ev.of("lost"); len(evs) != 1 || evs[0].Replica != lost || !strings.Contains(evs[0].Reason, "node n3") {
		t.Fatalf("lost events %+v; want one for %s naming n3", evs, lost)
	}
}

// TestClusterAdoptsAcrossLostNode: a node elected while another is down
// adopts the replicas of the live nodes and replaces the lost node's,
// calling nothing there.
func TestClusterAdoptsAcrossLostNode(t *testing.T) {
	h := newClusterHarness(t)
	h.lead()
	h.deploy("min = 3\nmax = 3")
	h.wait("3 ready replicas", func() bool { return len(h.replicas()["ready"]) == 3 })
	h.placed(3)
	before := h.nodesOf()
	h.cl.set(nil, h.cl.nodes...)
	h.wait("n1 to step down", func() bool { _, err := h.m.leading(); return err != nil })
	calls := h.remote["n3"].calls.Load()
	h.cl.set(&fakeTerm{st: h.m.o.Store}, info("n1"), info("n2"))
	h.wait("n1 to lead", func() bool { _, err := h.m.leading(); return err == nil })
	h.wait("3 ready replicas on n1 and n2", func() bool {
		n := 0
		for _, node := range h.nodesOf() {
			if node == "n3" {
				return false
			}
			n++
		}
		return n == 3 && len(h.replicas()["ready"]) == 3
	})
	if got := h.remote["n3"].calls.Load(); got != calls {
		t.Fatalf("%d calls made to the lost node", got-calls)
	}
	after := h.nodesOf()
	kept := 0
	for id, n := range before {
		if n != "n3" && after[id] == n {
			kept++
		}
	}
	if kept != 2 {
		t.Fatalf("records before %v, after %v; want the 2 on live nodes adopted", before, after)
	}
}

// TestClusterPlacementAffinity: [placement] nodes keeps an app's replicas
// on the nodes it names; memory that does not fit keeps them off a node.
func TestClusterPlacementAffinity(t *testing.T) {
	h := newClusterHarness(t)
	h.lead()
	h.deploy("min = 2\nmax = 2", "[placement]\nnodes = [\"n2\", \"n3\"]\nprefer = [\"n3\"]")
	h.wait("2 ready replicas", func() bool { return len(h.replicas()["ready"]) == 2 })
	h.placed(2)
	if on := h.on(); on["n1"] != 0 || on["n2"] != 1 || on["n3"] != 1 {
		t.Fatalf("containers by node %v; want one on n2 and one on n3", on)
	}
}

// TestClusterNoRoom: a replica no live node has room for fails to start
// with the reason, and none runs.
func TestClusterNoRoom(t *testing.T) {
	h := newClusterHarness(t)
	h.lead()
	h.deploy("min = 1\nmax = 1", "[resources]\nmemory = \"8Gi\"")
	h.wait("the start to fail", func() bool { return len(h.replicas()["failed"]) >= 1 })
	a, err := h.m.Get(context.Background(), "hello")
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(a.Error, "no node has room") || !strings.Contains(a.Error, "n1 has 4294967296 of 4294967296 bytes") {
		t.Fatalf("app error %q; want no room, by node", a.Error)
	}
	if on := h.on(); on["n1"]+on["n2"]+on["n3"] != 0 {
		t.Fatalf("containers by node %v; want none", on)
	}
}

// TestClusterRemoveStrays: a node that comes back removes the replica
// containers whose record is gone or names another node, and keeps its
// own, those started since it came back and containers of other kinds.
func TestClusterRemoveStrays(t *testing.T) {
	h := newClusterHarness(t)
	ctx := context.Background()
	back := h.clock.Now()
	mk := func(id, kind string, created time.Time, node string) Container {
		t.Helper()
		lbls := map[string]string{labels.Kind: kind, labels.App: "hello"}
		if _, err := h.rt.Run(ctx, runtime.Spec{ID: id, Labels: lbls}); err != nil {
			t.Fatal(err)
		}
		if node != "" {
			b, _ := json.Marshal(replicaRecord{ID: id, App: "hello", Node: node, State: StateReady})
			if _, err := h.m.o.Store.Put(ctx, store.ReplicaKey("hello", id), b); err != nil {
				t.Fatal(err)
			}
		}
		return Container{ID: id, Labels: lbls, Created: created}
	}
	old := back.Add(-time.Minute)
	cs := []Container{
		mk("hello-mine", labels.KindReplica, old, "n1"),
		mk("hello-moved", labels.KindReplica, old, "n2"),
		mk("hello-gone", labels.KindReplica, old, ""),
		mk("hello-new", labels.KindReplica, back, ""),
		mk("job-1", "job", old, ""),
	}
	removed, err := h.m.RemoveStrays(ctx, cs, back)
	if err != nil {
		t.Fatal(err)
	}
	slices.Sort(removed)
	if want := []string{"hello-gone", "hello-moved"}; !slices.Equal(removed, want) {
		t.Fatalf("removed %v; want %v", removed, want)
	}
	for id, want := range map[string]bool{"hello-mine": true, "hello-moved": false, "hello-gone": false, "hello-new": true, "job-1": true} {
		if _, err := h.rt.get(id); (err == nil) != want {
			t.Errorf("container %s there: %v; want %v", id, err == nil, want)
		}
	}
}

// TestClusterDrainingNode: the replicas of a node marked draining are
// replaced on the others, each drained once its replacement is ready.
func TestClusterDrainingNode(t *testing.T) {
	h := newClusterHarness(t)
	term := h.lead()
	h.deploy("min = 3\nmax = 3")
	h.wait("3 ready replicas", func() bool { return len(h.replicas()["ready"]) == 3 })
	h.placed(3)
	n3 := info("n3")
	n3.Draining = true
	h.cl.set(term, info("n1"), info("n2"), n3)
	h.advanceUntil("n3's replica replaced and stopped", tick, func() bool {
		on := h.on()
		return on["n3"] == 0 && on["n1"]+on["n2"] == 3 && len(h.replicas()["ready"]) == 3
	})
	// Events are recorded in the background.
	h.wait("a start because node n3 is draining", func() bool {
		for _, e := range h.ev.of("start") {
			if strings.Contains(e.Reason, "node n3 is draining") {
				return true
			}
		}
		return false
	})
	if evs := h.ev.of("lost"); len(evs) != 0 {
		t.Fatalf("lost events %+v; a draining node loses nothing", evs)
	}
	// The log of the replica removed from n3 went with it.
	logs, err := os.ReadDir(filepath.Join(h.remote["n3"].dir, "hello", "logs"))
	if err != nil || len(logs) != 0 {
		t.Fatalf("n3's logs of hello: %v, %v; want none left", logs, err)
	}
}

// TestClusterUnreachableNode: a replica whose node stops answering (before
// its lease says it is lost) leaves the route at its first failed check,
// and after the check's failures is given up and replaced without being
// counted as failing: no back-off, the app is not failing.
func TestClusterUnreachableNode(t *testing.T) {
	h := newClusterHarness(t)
	h.lead()
	h.deploy("min = 3\nmax = 3")
	h.wait("3 ready replicas", func() bool { return len(h.replicas()["ready"]) == 3 })
	h.placed(3)
	var gone string
	for id, n := range h.nodesOf() {
		if n == "n3" {
			gone = id
		}
	}
	h.remote["n3"].mute.Store(true)
	h.advanceUntil("n3's replica replaced", time.Second, func() bool {
		a := h.replicas()
		_, routed := h.endpointNodes()[gone]
		return len(a["ready"]) == 3 && !routed && !slices.Contains(a["ready"], gone)
	})
	h.recorded()
	if evs := h.ev.of("fail"); len(evs) != 0 {
		t.Fatalf("fail events %+v; an unreachable node is no failure of its replica", evs)
	}
	h.wait("the lost event", func() bool { return len(h.ev.of("lost")) > 0 }) // recorded in the background
	if evs := h.ev.of("lost"); len(evs) != 1 || evs[0].Replica != gone || !strings.Contains(evs[0].Reason, "node n3 does not answer") {
		t.Fatalf("lost events %+v; want %s's, naming n3", h.ev.of("lost"), gone)
	}
	a, err := h.m.Get(context.Background(), "hello")
	if err != nil || a.State != "running" {
		t.Fatalf("app %+v, %v; want running", a.State, err)
	}
	if on := h.on(); on["n1"]+on["n2"] != 3 {
		t.Fatalf("containers by node %v; want the replacement on n1 or n2", on)
	}
}
