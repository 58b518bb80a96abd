package serving

import (
	"testing"
	"time"

	"github.com/shoal-run/shoal/internal/route"
)

// Of two routes made under the lock and published after it, the newer
// wins whatever order the publishers get to the router in, and nothing
// is published once the route is removed.
func TestRoutePubKeepsTheNewest(t *testing.T) {
	r := &fakeRouter{routes: map[string]route.Route{}}
	var p routePub
	older, newer := p.next(), p.next()
	p.publish(r, newer, route.Route{App: "a", Endpoints: []route.Endpoint{{ID: "new"}}})
	p.publish(r, older, route.Route{App: "a", Endpoints: []route.Endpoint{{ID: "old"}}})
	if got := r.endpoints("a"); len(got) != 1 || got[0] != "new" {
		t.Fatalf("route after an older publish: %v, want [new]", got)
	}
	if _, n := r.since(0); n != 1 {
		t.Fatalf("%d routes set, want 1 (the older one dropped)", n)
	}
	p.remove(r, "a")
	p.publish(r, p.next(), route.Route{App: "a"})
	if _, ok := r.routes["a"]; ok {
		t.Fatal("a route was published after the app's route was removed")
	}
}

// A holder of the lock that thaws a replica and changes the route
// publishes one route, with the thawed replica in it, once it unlocks.
func TestUnlockThawsBeforeItPublishes(t *testing.T) {
	h := newHarness(t)
	h.deploy("min = 0\nmax = 2\nidle_timeout = \"1s\"")
	h.m.Activate("hello")
	h.wait("one ready", func() bool { return len(h.replicas()[StateReady]) == 1 })
	id := h.replicas()[StateReady][0]
	h.advanceUntil("the replica freezes", time.Second, func() bool { return len(h.replicas()[StateFrozen]) == 1 })
	ctl := h.m.app("hello")
	_, mark := h.r.since(0)
	ctl.mu.Lock()
	r := ctl.reps[id]
	ctl.thaw(r)
	ctl.publish()
	ctl.unlock()
	routes, _ := h.r.since(mark)
	if len(routes) != 1 || len(routes[0].Endpoints) != 1 || routes[0].Endpoints[0].ID != id {
		t.Fatalf("routes published by the unlock: %+v, want one with %s", routes, id)
	}
	if got := h.replicas()[StateReady]; len(got) != 1 || got[0] != id {
		t.Fatalf("ready replicas after the thaw: %v", got)
	}
}
