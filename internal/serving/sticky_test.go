package serving

import (
	"context"
	"strings"
	"testing"

	"github.com/shoal-run/shoal/internal/api/types"
)

// [traffic] sticky sets the route's stickiness at each deploy, without a
// new revision; a traffic call changes it until the next deploy.
func TestStickyFromConfig(t *testing.T) {
	h := newHarness(t)
	h.deploy("min = 1", "[traffic]\nsticky = true")
	h.wait("ready", func() bool { return len(h.byRevision(1, StateReady)) == 1 })
	if a, rt := h.app(), h.r.route("hello"); !a.Sticky || !rt.Sticky {
		t.Fatalf("deployed sticky: app sticky %v, route sticky %v", a.Sticky, rt.Sticky)
	}
	h.deploy("min = 1")
	if a, rt := h.app(), h.r.route("hello"); a.Sticky || rt.Sticky || a.Revision != 1 {
		t.Fatalf("deployed without [traffic]: revision %d, app sticky %v, route sticky %v", a.Revision, a.Sticky, rt.Sticky)
	}
	h.wait("the traffic event", func() bool { return len(h.ev.of("traffic")) > 0 })
	if evs := h.ev.of("traffic"); !strings.Contains(evs[len(evs)-1].Reason, "sticky false by shoal.toml") {
		t.Fatalf("traffic events: %+v", evs)
	}
	// A traffic call wins until the next deploy.
	if _, err := h.m.SetTraffic(context.Background(), "hello", types.TrafficRequest{
		Traffic: []types.TrafficTarget{{Revision: 1, Percent: 100}}, Sticky: true}); err != nil {
		t.Fatal(err)
	}
	if a, rt := h.app(), h.r.route("hello"); !a.Sticky || !rt.Sticky {
		t.Fatalf("after traffic --sticky: app sticky %v, route sticky %v", a.Sticky, rt.Sticky)
	}
	h.deploy("min = 1", "[traffic]\nsticky = false")
	if a, rt := h.app(), h.r.route("hello"); a.Sticky || rt.Sticky || a.Revision != 1 {
		t.Fatalf("deployed sticky = false: revision %d, app sticky %v, route sticky %v", a.Revision, a.Sticky, rt.Sticky)
	}
	// A new revision keeps the stickiness through its rollout.
	h.deploy("min = 1", env("2"), "[traffic]\nsticky = true")
	h.wait("the rollout is done", func() bool { ro := h.app().Rollout; return ro != nil && ro.State == types.RolloutDone })
	if a, rt := h.app(), h.r.route("hello"); !a.Sticky || !rt.Sticky || a.Revision != 2 {
		t.Fatalf("after the rollout: revision %d, app sticky %v, route sticky %v", a.Revision, a.Sticky, rt.Sticky)
	}
}
