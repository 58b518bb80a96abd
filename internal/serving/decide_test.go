package serving

import (
	"errors"
	"slices"
	"testing"
	"time"

	"github.com/shoal-run/shoal/internal/autoscale"
	"github.com/shoal-run/shoal/internal/manifest"
	"github.com/shoal-run/shoal/internal/route"
)

// decideCfg is an app's config as decide's cases need it: idle after 30 s,
// stopped after 10 m frozen, rolled back within 5 m.
func decideCfg() manifest.Config {
	var c manifest.Config
	c.Scale.IdleTimeout.Duration = 30 * time.Second
	c.Scale.FreezeTimeout.Duration = 10 * time.Minute
	c.Scale.RollbackGrace.Duration = 5 * time.Minute
	return c
}

// decide is table-tested: a view and an observation in, the count, its
// cause, the steps and the next round out.
func TestDecide(t *testing.T) {
	t0 := time.Date(2026, 1, 1, 12, 0, 0, 0, time.UTC)
	ago := func(d time.Duration) time.Time { return t0.Add(-d) }
	busy := route.Load{InFlight: 1, LastRequest: t0}
	quiet := route.Load{LastRequest: ago(time.Hour)}
	one := []trafficShare{{Revision: 1, Percent: 100}}
	ready := func(id string, rev int, active time.Duration) repView {
		return repView{id: id, rev: rev, state: StateReady, started: ago(time.Hour), active: ago(active)}
	}
	frozen := func(id string, rev int, since time.Duration) repView {
		return repView{id: id, rev: rev, state: StateFrozen, started: ago(time.Hour), active: ago(since), frozen: ago(since)}
	}
	type want struct {
		n     int
		cause string
		scale bool
		steps []string
		next  time.Duration
	}
	cases := []struct {
		name  string
		v     view
		load  route.Load
		scale autoscale.Decision
		want  want
	}{
		{
			name: "no replica, no request: nothing to do, no round due",
			v:    view{max: 10, revision: 1, traffic: one},
			load: quiet,
			want: want{cause: causeAutoscaler, next: 0},
		},
		{
			name: "a request waits: one replica starts",
			v:    view{max: 10, revision: 1, traffic: one, woken: true},
			load: route.Load{Queued: 1, LastRequest: t0},
			want: want{n: 1, cause: causeWaiting, scale: true, steps: []string{"start 1: scale out"}, next: tick},
		},
		{
			name: "a request waits, the app backs off: the count says 1, nothing starts",
			v:    view{max: 10, revision: 1, traffic: one, woken: true, backoff: t0.Add(time.Second)},
			load: route.Load{Queued: 1, LastRequest: t0},
			want: want{n: 1, cause: causeWaiting, scale: true, next: 0},
		},
		{
			name:  "the autoscaler asks for 2 with one frozen: it thaws, one more starts",
			v:     view{max: 10, revision: 1, traffic: one, reps: []repView{frozen("a", 1, time.Minute)}},
			load:  busy,
			scale: autoscale.Decision{Replicas: 2, Reason: "load"},
			want:  want{n: 2, cause: causeAutoscaler, scale: true, steps: []string{"thaw a: needed to serve", "start 1: scale out"}, next: tick},
		},
		{
			name:  "the autoscaler's memory does not grow an idle app",
			v:     view{max: 10, revision: 1, traffic: one, desired: 1, reps: []repView{ready("a", 1, time.Second)}},
			load:  quiet,
			scale: autoscale.Decision{Replicas: 3},
			want:  want{n: 1, cause: causeIdle, next: quietRound},
		},
		{
			name:  "quiet and settled (no request, no new replica for quietSettle), kept past idle_timeout by min: the next round at quietLong",
			v:     view{max: 10, revision: 1, traffic: one, desired: 1, min: 1, reps: []repView{ready("a", 1, time.Hour)}},
			load:  quiet,
			scale: autoscale.Decision{Replicas: 1},
			want:  want{n: 1, cause: causeAutoscaler, next: quietLong},
		},
		{
			name: "quiet and settled: the next round at a replica's max_lifetime when that is sooner",
			v: view{cfg: func() manifest.Config {
				c := decideCfg()
				c.Scale.MaxLifetime.Duration = time.Hour + 3*time.Second
				return c
			}(), max: 10, revision: 1, traffic: one, desired: 1, min: 1, reps: []repView{ready("a", 1, time.Hour)}},
			load:  quiet,
			scale: autoscale.Decision{Replicas: 1},
			want:  want{n: 1, cause: causeAutoscaler, next: 3 * time.Second},
		},
		{
			name:  "quiet, a replica started less than quietSettle ago: the next round at quietRound",
			v:     view{max: 10, revision: 1, traffic: one, desired: 1, min: 1, reps: []repView{{id: "a", rev: 1, state: StateReady, started: ago(10 * time.Second), active: ago(time.Hour)}}},
			load:  quiet,
			scale: autoscale.Decision{Replicas: 1},
			want:  want{n: 1, cause: causeAutoscaler, next: quietRound},
		},
		{
			name:  "quiet and ready: the next round at its idle_timeout when that is sooner than quietRound",
			v:     view{max: 10, revision: 1, traffic: one, desired: 1, reps: []repView{ready("a", 1, 30*time.Second-300*time.Millisecond)}},
			load:  quiet,
			scale: autoscale.Decision{Replicas: 1},
			want:  want{n: 1, cause: causeAutoscaler, next: 300 * time.Millisecond},
		},
		{
			name:  "ready with a request under quietAfter ago: every tick",
			v:     view{max: 10, revision: 1, traffic: one, desired: 1, reps: []repView{ready("a", 1, time.Second)}},
			load:  route.Load{LastRequest: t0.Add(-time.Second)},
			scale: autoscale.Decision{Replicas: 1},
			want:  want{n: 1, cause: causeAutoscaler, next: tick},
		},
		{
			name:  "idle for idle_timeout: the replica freezes",
			v:     view{max: 10, revision: 1, traffic: one, desired: 1, reps: []repView{ready("a", 1, 30*time.Second)}},
			load:  quiet,
			scale: autoscale.Decision{Replicas: 1},
			want:  want{n: 1, cause: causeAutoscaler, steps: []string{"freeze a: idle for 30s"}, next: tick},
		},
		{
			name:  "scale in: the least recently used freezes, never below min",
			v:     view{min: 1, max: 10, revision: 1, traffic: one, desired: 3, reps: []repView{ready("a", 1, time.Second), ready("b", 1, 2*time.Second), ready("c", 1, 3*time.Second)}},
			load:  route.Load{LastRequest: t0},
			scale: autoscale.Decision{Replicas: 1},
			want:  want{n: 1, cause: causeAutoscaler, scale: true, steps: []string{"freeze c: scale in", "freeze b: scale in"}, next: tick},
		},
		{
			name: "frozen only: the next round is due at its freeze_timeout",
			v:    view{max: 10, revision: 1, traffic: one, reps: []repView{frozen("a", 1, time.Minute), frozen("b", 1, 4*time.Minute)}},
			load: quiet,
			want: want{cause: causeAutoscaler, next: 6 * time.Minute},
		},
		{
			name: "frozen for freeze_timeout: it stops",
			v:    view{max: 10, revision: 1, traffic: one, reps: []repView{frozen("a", 1, 10*time.Minute)}},
			load: quiet,
			want: want{cause: causeAutoscaler, steps: []string{"stop a: frozen for 10m0s"}, next: tick},
		},
		{
			name:  "min raises the count",
			v:     view{min: 2, max: 10, revision: 1, traffic: one},
			load:  quiet,
			scale: autoscale.Decision{Replicas: 0},
			want:  want{n: 2, cause: causeBounds, scale: true, steps: []string{"start 1: scale out", "start 1: scale out"}, next: tick},
		},
		{
			name:  "halted replicas count toward max",
			v:     view{max: 3, revision: 1, traffic: one, desired: 2, reps: []repView{{id: "h", rev: 1, state: StateHalted}, ready("a", 1, 0), ready("b", 1, 0)}},
			load:  busy,
			scale: autoscale.Decision{Replicas: 3, Reason: "load"},
			want:  want{n: 2, cause: causeHalted, next: tick},
		},
		{
			name:  "the app's self API raises the count",
			v:     view{max: 10, revision: 1, traffic: one, desired: 1, reps: []repView{ready("a", 1, 0)}, floor: selfFloor{n: 2, at: t0}},
			load:  busy,
			scale: autoscale.Decision{Replicas: 1},
			want:  want{n: 2, cause: causeSelf, scale: true, steps: []string{"start 1: scale out"}, next: tick},
		},
		{
			name:  "a split keeps a replica of each revision",
			v:     view{max: 10, revision: 2, traffic: []trafficShare{{1, 50}, {2, 50}}},
			load:  busy,
			scale: autoscale.Decision{Replicas: 1},
			want:  want{n: 2, cause: causeSplit, scale: true, steps: []string{"start 1: scale out", "start 2: scale out"}, next: tick},
		},
		{
			name: "past max_lifetime: a replacement starts",
			v: view{cfg: func() manifest.Config { c := decideCfg(); c.Scale.MaxLifetime.Duration = time.Minute; return c }(),
				min: 1, max: 10, revision: 1, traffic: one, desired: 1, reps: []repView{ready("a", 1, 0)}},
			load:  busy,
			scale: autoscale.Decision{Replicas: 1},
			want:  want{n: 1, cause: causeAutoscaler, steps: []string{"start 1 for a: replace a: past max_lifetime"}, next: tick},
		},
		{
			name: "past max_lifetime: it drains once its replacement is ready",
			v: view{cfg: func() manifest.Config { c := decideCfg(); c.Scale.MaxLifetime.Duration = time.Minute; return c }(),
				min: 1, max: 10, revision: 1, traffic: one, desired: 1, reps: []repView{
					{id: "a", rev: 1, state: StateReady, started: ago(time.Hour), active: t0, replacement: "b", replacementState: StateReady},
					{id: "b", rev: 1, state: StateReady, started: t0, active: t0}}},
			load:  busy,
			scale: autoscale.Decision{Replicas: 1},
			want:  want{n: 1, cause: causeAutoscaler, steps: []string{"drain a: replaced by b"}, next: tick},
		},
		{
			name: "on a draining node: its replacement failed, another may start",
			v: view{min: 1, max: 10, revision: 1, traffic: one, desired: 1, backoff: t0.Add(time.Second), reps: []repView{
				{id: "a", rev: 1, state: StateReady, node: "n2", draining: true, started: t0, active: t0, replacement: "b", replacementState: StateDead}}},
			load:  busy,
			scale: autoscale.Decision{Replicas: 1},
			want:  want{n: 1, cause: causeAutoscaler, steps: []string{"unreplace a: "}, next: tick},
		},
		{
			name: "a rollout surges beside the revision in service",
			v: view{max: 10, revision: 2, traffic: one, desired: 1, reps: []repView{ready("a", 1, 0)},
				rollout: &rollout{Revision: 2, From: 1, State: rolloutProgressing, StartedAt: ago(time.Second)}, roAllowed: 3},
			load:  busy,
			scale: autoscale.Decision{Replicas: 1},
			want:  want{n: 1, cause: causeAutoscaler, steps: []string{"start 2: rollout of revision 2", "rollout"}, next: tick},
		},
		{
			name: "a rollout whose replicas are ready moves traffic; the old revision freezes",
			v: view{max: 10, revision: 2, traffic: one, desired: 1, reps: []repView{ready("a", 1, 0), ready("b", 2, 0)},
				rollout: &rollout{Revision: 2, From: 1, State: rolloutProgressing, StartedAt: ago(time.Second), Want: 1}, roAllowed: 3},
			load:  busy,
			scale: autoscale.Decision{Replicas: 1},
			want: want{n: 1, cause: causeAutoscaler, next: tick, steps: []string{"rollout",
				"freeze a: revision 1 takes no traffic; kept frozen for 5m0s for a rollback"}},
		},
		{
			name: "a rollout whose replicas failed is rolled back; its starting replicas stop",
			v: view{max: 10, revision: 2, traffic: one, desired: 1, reps: []repView{ready("a", 1, 0), {id: "b", rev: 2, state: StateStarting}},
				rollout: &rollout{Revision: 2, From: 1, State: rolloutProgressing}, roFailures: 3, roAllowed: 3},
			load:  busy,
			scale: autoscale.Decision{Replicas: 1},
			want:  want{n: 1, cause: causeAutoscaler, next: tick, steps: []string{"rollout", "stop b: revision 2 takes no traffic"}},
		},
		{
			name: "a rollout whose revision cannot be read ends",
			v: view{max: 10, revision: 2, traffic: one, desired: 1, reps: []repView{ready("a", 1, 0)},
				rollout: &rollout{Revision: 2, From: 1, State: rolloutProgressing}, roErr: errors.New("gone")},
			load:  busy,
			scale: autoscale.Decision{Replicas: 1},
			want:  want{n: 1, cause: causeAutoscaler, next: tick, steps: []string{"rollout"}},
		},
		{
			name: "a revision without traffic stays frozen for rollback_grace, then stops",
			v:    view{max: 10, revision: 2, traffic: []trafficShare{{2, 100}}, reps: []repView{frozen("a", 1, 5*time.Minute), frozen("b", 1, time.Minute)}},
			load: quiet,
			want: want{cause: causeAutoscaler, next: tick, steps: []string{"stop a: revision 1 took no traffic for rollback_grace (5m0s)"}},
		},
		{
			name: "pre-made tier: an app at zero replicas has its next one made ahead",
			v:    view{max: 10, revision: 1, traffic: one, premadeOK: true},
			load: quiet,
			want: want{cause: causeAutoscaler, next: 0, steps: []string{"premake 1: the app is at zero replicas"}},
		},
		{
			name: "pre-made tier: one being made is kept",
			v:    view{max: 10, revision: 1, traffic: one, premadeOK: true, premade: premadeView{id: "p", rev: 1}},
			load: quiet,
			want: want{cause: causeAutoscaler, next: 0},
		},
		{
			name: "pre-made tier: a request waits, the start takes the premade replica",
			v:    view{max: 10, revision: 1, traffic: one, woken: true, premadeOK: true, premade: premadeView{id: "p", rev: 1, made: true}},
			load: route.Load{Queued: 1, LastRequest: t0},
			want: want{n: 1, cause: causeWaiting, scale: true, steps: []string{"start 1 from p: scale out"}, next: tick},
		},
		{
			name: "pre-made tier: a start waits for one being made, begun before it, rather than start its own (nor is it dropped)",
			v:    view{max: 10, revision: 1, traffic: one, woken: true, premadeOK: true, premade: premadeView{id: "p", rev: 1, began: ago(300 * time.Millisecond)}},
			load: route.Load{Queued: 1, LastRequest: t0},
			want: want{n: 1, cause: causeWaiting, scale: true, next: tick},
		},
		{
			name: "pre-made tier: the round that waits for one being made is due when premadeWait has passed since its making began",
			v:    view{max: 10, revision: 1, traffic: one, woken: true, premadeOK: true, premade: premadeView{id: "p", rev: 1, began: ago(premadeWait - 30*time.Millisecond)}},
			load: route.Load{Queued: 1, LastRequest: t0},
			want: want{n: 1, cause: causeWaiting, scale: true, next: 30 * time.Millisecond},
		},
		{
			name: "pre-made tier: one being made for premadeWait is not waited for any longer (nor dropped: the app is not at zero until the next round)",
			v:    view{max: 10, revision: 1, traffic: one, woken: true, premadeOK: true, premade: premadeView{id: "p", rev: 1, began: ago(premadeWait)}},
			load: route.Load{Queued: 1, LastRequest: t0},
			want: want{n: 1, cause: causeWaiting, scale: true, steps: []string{"start 1: scale out"}, next: tick},
		},
		{
			name:  "pre-made tier: of two starts, one waits for the premade replica being made and the other starts",
			v:     view{max: 10, revision: 1, traffic: one, premadeOK: true, premade: premadeView{id: "p", rev: 1, began: ago(300 * time.Millisecond)}},
			load:  busy,
			scale: autoscale.Decision{Replicas: 2},
			want:  want{n: 2, cause: causeAutoscaler, scale: true, steps: []string{"start 1: scale out"}, next: tick},
		},
		{
			name: "pre-made tier: a new revision drops the old one's and makes its own",
			v:    view{max: 10, revision: 2, traffic: []trafficShare{{2, 100}}, premadeOK: true, premade: premadeView{id: "p", rev: 1, made: true}},
			load: quiet,
			want: want{cause: causeAutoscaler, next: 0, steps: []string{"unpremake p: revision 2 is the app's current", "premake 2: the app is at zero replicas"}},
		},
		{
			name: "pre-made tier: one the budget no longer admits is dropped",
			v:    view{max: 10, revision: 1, traffic: one, premade: premadeView{id: "p", rev: 1, made: true}},
			load: quiet,
			want: want{cause: causeAutoscaler, next: 0, steps: []string{"unpremake p: the app has replicas, or the budget keeps those of more recently used apps"}},
		},
		{
			name: "pre-made tier: none while the app has a checkpoint of its revision, which the next start restores",
			v:    view{max: 10, revision: 1, traffic: one, premadeOK: true, restorable: 1, premade: premadeView{id: "p", rev: 1, made: true}},
			load: quiet,
			want: want{cause: causeAutoscaler, next: 0, steps: []string{"unpremake p: the app's checkpoint restores its next replica"}},
		},
		{
			name: "pre-made tier: a request for an app with a checkpoint restores it rather than take the premade replica",
			v:    view{max: 10, revision: 1, traffic: one, woken: true, premadeOK: true, restorable: 1, premade: premadeView{id: "p", rev: 1, made: true}},
			load: route.Load{Queued: 1, LastRequest: t0},
			want: want{n: 1, cause: causeWaiting, scale: true, steps: []string{"start 1: scale out", "unpremake p: the app's checkpoint restores its next replica"}, next: tick},
		},
		{
			name: "pre-made tier: a checkpoint of another revision keeps none from being made",
			v:    view{max: 10, revision: 2, traffic: []trafficShare{{2, 100}}, premadeOK: true, restorable: 1},
			load: quiet,
			want: want{cause: causeAutoscaler, next: 0, steps: []string{"premake 2: the app is at zero replicas"}},
		},
		{
			name: "pre-made tier: none while the app has replicas of its revision",
			v:    view{max: 10, revision: 1, traffic: one, premadeOK: true, reps: []repView{frozen("a", 1, time.Minute)}},
			load: quiet,
			want: want{cause: causeAutoscaler, next: 10*time.Minute - time.Minute},
		},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			if c.v.cfg.Scale.IdleTimeout.Duration == 0 {
				c.v.cfg = decideCfg()
			}
			reps := slices.Clone(c.v.reps)
			p := decide(c.v, observation{load: c.load, scale: c.scale}, t0)
			var steps []string
			for _, s := range p.steps {
				steps = append(steps, s.String())
			}
			got := want{n: p.want, cause: p.cause, scale: p.scale, steps: steps, next: p.next}
			if got.n != c.want.n || got.cause != c.want.cause || got.scale != c.want.scale || got.next != c.want.next ||
				!slices.Equal(got.steps, c.want.steps) {
				t.Errorf("decide:\n got %+v\nwant %+v", got, c.want)
			}
			if !slices.Equal(reps, c.v.reps) {
				t.Errorf("decide changed its view's replicas")
			}
		})
	}
}

// The rollout's plan says how far it is, and why traffic moves.
func TestDecideRollout(t *testing.T) {
	t0 := time.Date(2026, 1, 1, 12, 0, 0, 0, time.UTC)
	v := view{cfg: decideCfg(), max: 10, revision: 2, traffic: []trafficShare{{1, 100}}, desired: 2,
		reps: []repView{
			{id: "a", rev: 1, state: StateReady, active: t0}, {id: "b", rev: 1, state: StateReady, active: t0},
			{id: "c", rev: 2, state: StateReady, active: t0}, {id: "d", rev: 2, state: StateStarting}},
		rollout: &rollout{Revision: 2, From: 1, State: rolloutProgressing, StartedAt: t0.Add(-time.Second), Ready: 0, Want: 2}, roAllowed: 3}
	p := decide(v, observation{load: route.Load{InFlight: 2, LastRequest: t0}, scale: autoscale.Decision{Replicas: 2}}, t0)
	if rp := p.rollout; !rp.progress || !rp.event || rp.ready != 1 || rp.want != 2 || rp.done != "" {
		t.Errorf("one of two ready: %+v", rp)
	}
	v.reps[3].state = StateReady
	v.rollout.Ready = 1
	p = decide(v, observation{load: route.Load{InFlight: 2, LastRequest: t0}, scale: autoscale.Decision{Replicas: 2}}, t0)
	rp := p.rollout
	if !rp.progress || rp.event || rp.done != "2/2 ready after 1s; traffic moved from revision 1" || !rp.hold {
		t.Errorf("two of two ready: %+v", rp)
	}
}

// TestDecideBoundsReason: a count raised to min or cut to max says so,
// not why the autoscaler asked for another (an idle app with min 1 read
// "0 → 1 replicas: no request for idle_timeout ..., so not the 1 the
// autoscaler's window still asks").
func TestDecideBoundsReason(t *testing.T) {
	t0 := time.Date(2026, 1, 1, 12, 0, 0, 0, time.UTC)
	quiet := route.Load{LastRequest: t0.Add(-time.Hour)}
	v := view{min: 1, max: 10, revision: 1, traffic: []trafficShare{{Revision: 1, Percent: 100}}, cfg: decideCfg()}
	p := decide(v, observation{load: quiet, scale: autoscale.Decision{Replicas: 1, Reason: "window"}}, t0)
	if p.want != 1 || p.reason != "[scale] min is 1" {
		t.Errorf("idle app with min 1: want %d, reason %q; want 1, \"[scale] min is 1\"", p.want, p.reason)
	}
	v.min, v.max = 0, 2
	p = decide(v, observation{load: route.Load{LastRequest: t0, InFlight: 50}, scale: autoscale.Decision{Replicas: 5, Reason: "load"}}, t0)
	if p.want != 2 || p.reason != "load; [scale] max is 2" {
		t.Errorf("busy app with max 2: want %d, reason %q; want 2, \"load; [scale] max is 2\"", p.want, p.reason)
	}
}
