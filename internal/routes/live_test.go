package routes

import (
	"slices"
	"testing"
)

// TestDeadNodeLeavesRoutesAtOnce: when a node leaves the live set, every
// proxy, the leader's and a follower's, stops routing its endpoints and
// cuts the requests in flight to them, without waiting for the leader to
// publish a new route; when the node is live again its endpoints return
// and nothing more is cut.
func TestDeadNodeLeavesRoutesAtOnce(t *testing.T) {
	g := newRig(t)
	n1 := g.node("n1", true)
	n2 := g.node("n2", false)
	n1.r.SetRoute(webRoute("r1a", "r2a", "r3a"))
	all2 := []string{"r1a@192.0.2.1:80", "r2a@10.88.0.2:8080", "r3a@192.0.2.3:80"}
	g.until("n2's proxy routes web", func() bool { return slices.Equal(n2.proxy.addrs("web"), all2) })

	for _, n := range []*testNode{n1, n2} {
		n.r.SetLive([]string{"n1", "n2", "n3"})
		if c := n.proxy.cutIDs(); c != nil {
			t.Fatalf("cut %v while every node is live", c)
		}
		n.r.SetLive([]string{"n1", "n2"})
		if c := n.proxy.cutIDs(); !slices.Equal(c, []string{"r3a"}) {
			t.Fatalf("cut %v; want [r3a], the dead node's endpoint", c)
		}
	}
	if got, want := n1.proxy.addrs("web"), []string{"r1a@10.88.0.1:8080", "r2a@192.0.2.2:80"}; !slices.Equal(got, want) {
		t.Fatalf("leader's proxy routes %v; want %v", got, want)
	}
	if got, want := n2.proxy.addrs("web"), all2[:2]; !slices.Equal(got, want) {
		t.Fatalf("follower's proxy routes %v; want %v", got, want)
	}
	// A route published meanwhile leaves the dead node out too.
	n1.r.SetRoute(webRoute("r1a", "r3a"))
	g.until("n2 applies the new route", func() bool {
		return slices.Equal(n2.proxy.addrs("web"), []string{"r1a@192.0.2.1:80"})
	})

	n2.r.SetLive([]string{"n1", "n2", "n3"})
	if got, want := n2.proxy.addrs("web"), []string{"r1a@192.0.2.1:80", "r3a@192.0.2.3:80"}; !slices.Equal(got, want) {
		t.Fatalf("after n3 is back n2's proxy routes %v; want %v", got, want)
	}
	if c := n2.proxy.cutIDs(); len(c) != 1 {
		t.Fatalf("cut %v after n3 came back; want only the first cut", c)
	}
}
