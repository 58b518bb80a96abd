package e2e

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/shoal-run/shoal/internal/api/types"
)

const statefulClusterManifest = healManifest + "[volumes]\ndata = \"/data\"\n[stateful]\nreplicas = 3\n"

// ordinalNodes maps each ordinal of a's ready replicas to its node.
func ordinalNodes(a types.App) map[int]string {
	out := map[int]string{}
	for _, r := range a.Replicas {
		if r.State == "ready" && r.Ordinal != nil {
			out[*r.Ordinal] = r.Node
		}
	}
	return out
}

// TestClusterStateful: a stateful app's ordinals spread over the nodes,
// one a node. A follower loses power: the ordinal whose volumes it holds
// waits for it, with the reason in the app's status, while an app with
// reseed = true starts that ordinal on another node; back, the node gets
// its ordinal again.
func TestClusterStateful(t *testing.T) {
	c := healCluster(t)
	leader, fs := c.roles()
	victim := fs[0]
	leader.deployApp("sdb", statefulClusterManifest)
	leader.deployApp("rdb", statefulClusterManifest+"reseed = true\n")
	three := func(a types.App) bool { return len(ordinalNodes(a)) == 3 && len(a.Replicas) == 3 }
	var where map[string]map[int]string
	for _, app := range []string{"sdb", "rdb"} {
		a := leader.appOn(app+": 3 ordinals ready", app, three)
		nodes := ordinalNodes(a)
		seen := map[string]bool{}
		for o, n := range nodes {
			if seen[n] {
				t.Fatalf("%s: ordinal %d shares node %s with a sibling: %v", app, o, n, nodes)
			}
			seen[n] = true
		}
		if where == nil {
			where = map[string]map[int]string{}
		}
		where[app] = nodes
	}
	ordOn := func(app string) int {
		for o, n := range where[app] {
			if n == victim.name {
				return o
			}
		}
		t.Fatalf("%s has no ordinal on %s: %v", app, victim.name, where[app])
		return -1
	}
	sOrd, rOrd := ordOn("sdb"), ordOn("rdb")

	if err := victim.PowerOff(); err != nil {
		t.Fatal(err)
	}
	// reseed = true: the ordinal starts on a live node, with fresh volumes.
	a := leader.appOn("rdb's ordinal back on a live node", "rdb", func(a types.App) bool {
		n, ok := ordinalNodes(a)[rOrd]
		return three(a) && ok && n != victim.name
	})
	if a.Waiting != "" {
		t.Errorf("rdb waits: %s", a.Waiting)
	}
	// reseed = false: the ordinal waits for its node, and says so.
	a = leader.appOn("sdb waits for "+victim.name, "sdb", func(a types.App) bool {
		return strings.Contains(a.Waiting, victim.name) && strings.Contains(a.Waiting, "reseed")
	})
	time.Sleep(3 * time.Second) // rounds go on meanwhile: nothing starts it elsewhere
	a = leader.appOn("sdb still waiting", "sdb", func(types.App) bool { return true })
	for _, r := range a.Replicas {
		if r.Ordinal != nil && *r.Ordinal == sOrd {
			t.Fatalf("sdb's ordinal %d, whose volumes are on %s, started without them: %+v", sOrd, victim.name, r)
		}
	}
	if len(a.Replicas) != 2 || a.Waiting == "" {
		t.Fatalf("sdb while %s is off: waiting %q, replicas %+v", victim.name, a.Waiting, a.Replicas)
	}
	var evs []types.Event
	if err := leader.GetJSON(context.Background(), "/v1/events?app=sdb", &evs); err != nil {
		t.Fatal(err)
	}
	found := false
	for _, e := range evs {
		found = found || (e.Kind == "waiting" && strings.Contains(e.Reason, victim.name))
	}
	if !found {
		t.Errorf("no waiting event of sdb naming %s: %+v", victim.name, evs)
	}

	// Back, the node runs its ordinal again.
	if err := victim.PowerOn(context.Background()); err != nil {
		t.Fatal(err)
	}
	c.roles()
	a = leader.appOn("sdb's ordinal back on "+victim.name, "sdb", func(a types.App) bool {
		return three(a) && ordinalNodes(a)[sOrd] == victim.name
	})
	if a.Waiting != "" {
		t.Errorf("sdb still waits: %s", a.Waiting)
	}
}
