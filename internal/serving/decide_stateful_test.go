package serving

import (
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/shoal-run/shoal/internal/autoscale"
	"github.com/shoal-run/shoal/internal/route"
)

// A stateful app's rounds are table-tested as any app's: its ordinals
// start in order, stop in reverse order, are replaced in place one at a
// time, and never freeze unless the manifest says so.
func TestDecideStateful(t *testing.T) {
	t0 := time.Date(2026, 1, 1, 12, 0, 0, 0, time.UTC)
	ago := func(d time.Duration) time.Time { return t0.Add(-d) }
	rep := func(ord, rev int, s State) repView {
		return repView{id: "db-" + string(rune('0'+ord)) + "-x" + string(rune('0'+rev)), ord: ord, rev: rev, state: s,
			started: ago(time.Hour), active: ago(time.Hour), frozen: ago(time.Hour)}
	}
	cfg := decideCfg()
	cfg.Stateful.Replicas = 3
	freezing := cfg
	freezing.Stateful.Freeze = true
	quiet := route.Load{LastRequest: ago(time.Hour)}
	v := func(rev int, reps ...repView) view {
		return view{cfg: cfg, min: 3, max: 3, revision: rev, desired: 3, reps: reps}
	}
	cases := []struct {
		name  string
		v     view
		load  route.Load
		steps []string
		next  time.Duration
	}{
		{name: "a new app: ordinal 0 starts alone", v: v(1),
			steps: []string{"start 1 as ordinal 0: ordinal 0 of 3"}, next: tick},
		{name: "ordinal 0 starting: the next waits", v: v(1, rep(0, 1, StateStarting)), next: tick},
		{name: "ordinal 0 ready: ordinal 1 starts", v: v(1, rep(0, 1, StateReady)),
			steps: []string{"start 1 as ordinal 1: ordinal 1 of 3"}, next: tick},
		{name: "ordinal 1 gone while 0 and 2 serve: replaced in place", v: v(1, rep(0, 1, StateReady), rep(2, 1, StateReady)),
			steps: []string{"start 1 as ordinal 1: ordinal 1 of 3"}, next: tick},
		{name: "ordinal 1 failed, its container not yet removed: its successor waits",
			v: v(1, rep(0, 1, StateReady), rep(1, 1, StateFailed), rep(2, 1, StateReady)), next: tick},
		{name: "ordinal 1 failed and removed: its successor starts",
			v:     v(1, rep(0, 1, StateReady), rep(1, 1, StateDead), rep(2, 1, StateReady)),
			steps: []string{"start 1 as ordinal 1: ordinal 1 of 3"}, next: tick},
		{name: "backing off: nothing starts",
			v: func() view { x := v(1, rep(0, 1, StateReady)); x.backoff = t0.Add(time.Second); return x }(), next: tick},
		{name: "all up and idle for an hour: nothing moves, no freeze",
			v: v(1, rep(0, 1, StateReady), rep(1, 1, StateReady), rep(2, 1, StateReady)), next: quietRound},
		{name: "freeze = true: idle ones freeze",
			v: func() view {
				x := v(1, rep(0, 1, StateReady), rep(1, 1, StateReady))
				x.cfg, x.max = freezing, 2
				return x
			}(),
			steps: []string{"freeze db-0-x1: idle for 30s", "freeze db-1-x1: idle for 30s"}, next: tick},
		{name: "scale down to 1: the highest ordinal goes first",
			v: func() view {
				x := v(1, rep(0, 1, StateReady), rep(1, 1, StateReady), rep(2, 1, StateReady))
				x.max = 1
				return x
			}(),
			steps: []string{"drain db-2-x1: scale down to 1: the highest ordinal goes first; its volumes stay"}, next: tick},
		{name: "scale down to 1: ordinal 1 waits for 2 to be gone",
			v: func() view {
				x := v(1, rep(0, 1, StateReady), rep(1, 1, StateReady), rep(2, 1, StateDraining))
				x.max = 1
				return x
			}(), next: tick},
		{name: "rolling upgrade: the highest ordinal first",
			v:     v(2, rep(0, 1, StateReady), rep(1, 1, StateReady), rep(2, 1, StateReady)),
			steps: []string{"drain db-2-x1: rolling upgrade to revision 2: ordinal 2's turn"}, next: tick},
		{name: "rolling upgrade: ordinal 2 gone, it starts again with the new revision",
			v:     v(2, rep(0, 1, StateReady), rep(1, 1, StateReady)),
			steps: []string{"start 2 as ordinal 2: ordinal 2 of 3"}, next: tick},
		{name: "rolling upgrade: ordinal 2 starting, 1 waits",
			v: v(2, rep(0, 1, StateReady), rep(1, 1, StateReady), rep(2, 2, StateStarting)), next: tick},
		{name: "rolling upgrade: ordinal 2 up, 1's turn",
			v:     v(2, rep(0, 1, StateReady), rep(1, 1, StateReady), rep(2, 2, StateReady)),
			steps: []string{"drain db-1-x1: rolling upgrade to revision 2: ordinal 1's turn"}, next: tick},
		{name: "rolling upgrade: one on its way out at a time",
			v: v(2, rep(0, 1, StateReady), rep(1, 1, StateStopped), rep(2, 2, StateReady)), next: tick},
		{name: "a replica without an ordinal goes once every ordinal is up",
			v: func() view {
				x := v(1, rep(0, 1, StateReady), rep(1, 1, StateReady), rep(2, 1, StateReady))
				x.reps = append(x.reps, repView{id: "db-old", ord: -1, rev: 1, state: StateReady})
				return x
			}(),
			steps: []string{"drain db-old: the app is stateful: its ordinals serve"}, next: tick},
		{name: "cluster: ordinal 1's volumes are on a lost node (no reseed): it and those after it wait",
			v: func() view {
				x := v(1, rep(0, 1, StateReady), rep(2, 1, StateReady))
				x.ordWait = map[int]string{1: "ordinal 1 waits for node n2"}
				return x
			}(), next: tick},
		{name: "cluster: a replica on a draining node stays with its data (no reseed)",
			v: func() view {
				x := v(1, rep(0, 1, StateReady), rep(1, 1, StateReady))
				x.max, x.reps[1].draining, x.reps[1].node = 2, true, "n2"
				return x
			}(), next: quietRound},
		{name: "cluster: with reseed, it moves",
			v: func() view {
				x := v(1, rep(0, 1, StateReady), rep(1, 1, StateReady))
				x.max, x.reps[1].draining, x.reps[1].node = 2, true, "n2"
				x.cfg.Stateful.Reseed = true
				return x
			}(),
			steps: []string{"drain db-1-x1: replaced in place: node n2 is draining"}, next: tick},
		{name: "a request waits: frozen ordinals thaw",
			v: func() view {
				x := v(1, rep(0, 1, StateFrozen))
				x.cfg, x.max, x.woken = freezing, 1, true
				return x
			}(),
			steps: []string{"thaw db-0-x1: needed to serve"}, next: tick},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			load := c.load
			if load.LastRequest.IsZero() {
				load = quiet
			}
			reps := slices.Clone(c.v.reps)
			p := decide(c.v, observation{load: load, scale: autoscale.Decision{Replicas: 7}}, t0)
			var steps []string
			for _, s := range p.steps {
				steps = append(steps, s.String())
			}
			if c.v.ordWait != nil && p.waiting != c.v.ordWait[1] {
				t.Errorf("waiting %q, want %q", p.waiting, c.v.ordWait[1])
			}
			if !slices.Equal(steps, c.steps) || p.next != c.next || p.want != c.v.max || p.cause != causeBounds {
				t.Errorf("decide:\n got steps %q next %s want %d (%s)\nwant steps %q next %s want %d", steps, p.next, p.want, p.cause, c.steps, c.next, c.v.max)
			}
			if !slices.Equal(reps, c.v.reps) {
				t.Errorf("decide changed its view's replicas")
			}
		})
	}
}

// A rolling upgrade is done once every ordinal runs the new revision, and
// ends (rolls back) after `failures` failed replicas of it.
func TestDecideStatefulRollout(t *testing.T) {
	t0 := time.Date(2026, 1, 1, 12, 0, 0, 0, time.UTC)
	cfg := decideCfg()
	cfg.Stateful.Replicas = 2
	v := view{cfg: cfg, min: 2, max: 2, revision: 2, desired: 2, roAllowed: 3,
		rollout: &rollout{Revision: 2, From: 1, State: rolloutProgressing, StartedAt: t0.Add(-time.Second), Want: 2},
		reps:    []repView{{id: "a", ord: 0, rev: 1, state: StateReady}, {id: "b", ord: 1, rev: 2, state: StateReady}}}
	p := decide(v, observation{}, t0)
	if rp := p.rollout; !rp.progress || !rp.event || rp.ready != 1 || rp.want != 2 || rp.done != "" {
		t.Errorf("one of two: %+v", rp)
	}
	v.reps[0].rev = 2
	v.rollout.Ready = 1
	p = decide(v, observation{}, t0)
	if rp := p.rollout; rp.done != "2/2 ordinals on revision 2 after 1s, one at a time" || rp.hold || p.count(stepRollout) != 1 {
		t.Errorf("two of two: %+v", rp)
	}
	v.roFailures = 3
	if p = decide(v, observation{}, t0); p.rollout.end == "" {
		t.Errorf("three failures: the rollout goes on: %+v", p.rollout)
	}
}

// A stateful app's replicas ask for no replica of their own, and a
// rollback starts none beside its ordinals: they go back one at a time.
func TestDecideStatefulAsked(t *testing.T) {
	t0 := time.Date(2026, 1, 1, 12, 0, 0, 0, time.UTC)
	cfg := decideCfg()
	cfg.Name, cfg.Stateful.Replicas = "db", 2
	v := view{cfg: cfg, min: 2, max: 2, revision: 1, reps: []repView{{id: "db-0-a", ord: 0, rev: 1, state: StateReady}}}
	if _, err := decideReplicate(v, "db-0-a", t0); err == nil || !strings.Contains(err.Error(), "stateful") {
		t.Errorf("replicate of a stateful app: %v", err)
	}
	if p := decideRollback(v, route.Load{InFlight: 1}, 1); len(p.steps) != 0 || p.want != 2 {
		t.Errorf("rollback of a stateful app: %+v", p)
	}
}
