package serving

import (
	"fmt"
	"sort"
	"time"
)

// A stateful app ([stateful] in shoal.toml) runs ordinals: replica n of
// it is the one with ordinal n, which mounts its own copy of each volume.
// Its count is the record's (stateful.replicas, or `shoal app scale`),
// not the autoscaler's, and at most one replica of an ordinal exists at a
// time, so that two never share a volume: a successor starts once its
// predecessor's container is removed. decideStateful plans its rounds:
//
//   - ordered start: the lowest ordinal without a replica starts once
//     every lower one is ready (its health check and ready_command
//     passed); one start at a time;
//   - reverse-ordered stop: ordinals at or above the count go highest
//     first, the next once the one above is gone; their volumes stay;
//   - in-place replacement: a replica of an older revision (a rolling
//     upgrade, highest ordinal first), past max_lifetime or on a draining
//     node drains, one at a time and only while every ordinal is ready;
//     its ordinal then starts again on the same volume;
//   - no freeze unless stateful.freeze, and then no stop of a frozen one.

// ordinalPlanner is decide for a stateful app.
type ordinalPlanner struct {
	*planner
	byOrd map[int]*repView // the replica holding each ordinal (not gone or removed)
	other []*repView       // replicas without an ordinal (the app was not stateful)
}

// holds reports whether r holds its ordinal: its container may still
// exist. A failed replica whose container is removed (dead) holds none.
func holds(r *repView) bool { return r.state != StateDead && r.state != StateGone }

// settled reports whether r counts as up for the ordinals after it.
func settled(r *repView) bool {
	switch r.state {
	case StateReady, StateFrozen, StateFreezing, StateThawing, StateHalted:
		return true
	}
	return false
}

func decideStateful(v view, obs observation, now time.Time) plan {
	pl := &planner{v: v, obs: obs, now: now, reps: make(map[string]*repView, len(v.reps))}
	op := &ordinalPlanner{planner: pl, byOrd: map[int]*repView{}}
	for i := range v.reps {
		r := v.reps[i]
		pl.reps[r.id] = &r
		switch {
		case r.ord < 0:
			op.other = append(op.other, &r)
		case holds(&r):
			op.byOrd[r.ord] = &r
		}
	}
	want := v.max
	pl.p.want, pl.p.cause = want, causeBounds
	pl.p.reason = fmt.Sprintf("stateful: %d ordinals", want)
	pl.p.scale = want != v.desired
	for _, r := range pl.reps {
		if r.state == StateReady {
			pl.p.unwake = true
		}
	}
	shrinking := op.scaleDown(want)
	up := op.startInOrder(want, shrinking)
	if up && !shrinking {
		op.replace(want)
	}
	op.freezeIdle()
	op.rolloutStep(want)
	pl.p.next = op.next(want)
	return pl.p
}

// scaleDown stops the ordinals at or above want, highest first; it
// reports whether one is still on its way out.
func (op *ordinalPlanner) scaleDown(want int) bool {
	var ords []int
	for o := range op.byOrd {
		if o >= want {
			ords = append(ords, o)
		}
	}
	if len(ords) == 0 {
		return false
	}
	sort.Sort(sort.Reverse(sort.IntSlice(ords)))
	r := op.byOrd[ords[0]]
	if !r.state.exiting() {
		op.leave(r, fmt.Sprintf("scale down to %d: the highest ordinal goes first; its volumes stay", want))
	}
	return true
}

// leave takes r out of service: a running one drains, one not yet
// running stops.
func (op *ordinalPlanner) leave(r *repView, why string) {
	switch r.state {
	case StatePending, StateStarting, StateFrozen, StateThawing:
		op.stop(r, why)
	case StateReady, StateFreezing, StateHalted:
		r.state = StateDraining
		op.add(planStep{kind: stepDrain, id: r.id, why: why})
	}
}

// startInOrder starts the lowest ordinal below want that has no replica,
// once every ordinal below it is up, and thaws the frozen ones a request
// waits for. It reports whether every ordinal below want is up.
func (op *ordinalPlanner) startInOrder(want int, shrinking bool) bool {
	v, load := op.v, op.obs.load
	needed := v.woken || load.Queued > 0 || load.InFlight > 0
	up := true
	for o := 0; o < want; o++ {
		r := op.byOrd[o]
		switch {
		case r == nil && v.ordWait[o] != "":
			if op.p.waiting == "" {
				op.p.waiting = v.ordWait[o]
			}
			up = false
		case r == nil:
			if up && !shrinking && op.now.After(v.backoff) {
				op.add(planStep{kind: stepStart, rev: v.revision, ordinal: o, ordered: true,
					why: fmt.Sprintf("ordinal %d of %d", o, want)})
			}
			up = false
		case r.state == StateFrozen && needed:
			r.state = StateThawing
			op.add(planStep{kind: stepThaw, id: r.id, why: "needed to serve"})
		case !settled(r):
			up = false
		}
	}
	return up
}

// replace drains the highest ordinal whose replica is of another revision
// than the current one, past max_lifetime or on a draining node, when no
// replica of the app is on its way out: its successor starts in its
// place, on its volume, and the next one goes once that one is up.
func (op *ordinalPlanner) replace(want int) {
	for _, r := range op.pl() {
		if holds(r) && r.state.exiting() {
			return
		}
	}
	for o := want - 1; o >= 0; o-- {
		r := op.byOrd[o]
		if r == nil {
			continue
		}
		switch {
		case r.rev != op.v.revision:
			op.leave(r, fmt.Sprintf("rolling upgrade to revision %d: ordinal %d's turn", op.v.revision, o))
		case !op.fresh(r) && (!r.draining || op.v.cfg.Stateful.Reseed):
			// On a draining node, one whose data stays there (no
			// reseed) stays with it.
			op.leave(r, "replaced in place: "+staleWhy(r, ""))
		default:
			continue
		}
		return
	}
	// Replicas without an ordinal go once every ordinal is up.
	for _, r := range op.other {
		op.leave(r, "the app is stateful: its ordinals serve")
	}
}

// pl lists the app's replicas as the plan moves them.
func (op *ordinalPlanner) pl() []*repView {
	out := make([]*repView, 0, len(op.reps))
	for _, r := range op.reps {
		out = append(out, r)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].id < out[j].id })
	return out
}

// freezeIdle freezes ready replicas idle for idle_timeout, with
// stateful.freeze only; a stateful app's frozen replicas are never
// stopped.
func (op *ordinalPlanner) freezeIdle() {
	cfg := op.v.cfg
	if !cfg.Stateful.Freeze {
		return
	}
	idle := cfg.Scale.IdleTimeout.Duration
	for _, r := range op.pl() {
		if r.state == StateReady && r.ord >= 0 && op.now.Sub(r.active) >= idle && op.obs.load.Endpoints[r.id].InFlight == 0 &&
			!op.v.woken && op.obs.load.Queued == 0 {
			r.state = StateFreezing
			op.add(planStep{kind: stepFreeze, id: r.id, why: "idle for " + idle.String()})
		}
	}
}

// rolloutStep moves a rolling upgrade on: ready counts the ordinals below
// want that are up with the new revision; all of them done it; a
// revision whose replicas failed `failures` times rolls back (and the
// ordinals go back one at a time as they came).
func (op *ordinalPlanner) rolloutStep(want int) {
	v := op.v
	ro := v.rollout
	if !progressing(ro) {
		return
	}
	rp := &op.p.rollout
	switch {
	case v.roErr != nil:
		rp.end = fmt.Sprintf("revision %d cannot be read: %v", ro.Revision, v.roErr)
	case v.roFailures >= max(v.roAllowed, 1):
		rp.end = fmt.Sprintf("%d replicas of revision %d failed before it was ready: %s", v.roFailures, ro.Revision, v.lastErr)
	}
	if rp.end != "" {
		op.add(planStep{kind: stepRollout})
		return
	}
	ready := 0
	for o := 0; o < want; o++ {
		if r := op.byOrd[o]; r != nil && r.rev == ro.Revision && settled(r) {
			ready++
		}
	}
	if ready != ro.Ready || want != ro.Want {
		rp.progress, rp.event = true, ready != ro.Ready && ready < want
	}
	rp.ready, rp.want = ready, want
	if ready >= want {
		rp.took = op.now.Sub(ro.StartedAt).Round(time.Millisecond)
		rp.done = fmt.Sprintf("%d/%d ordinals on revision %d after %s, one at a time", ready, want, ro.Revision, rp.took)
	}
	if rp.progress || rp.done != "" {
		op.add(planStep{kind: stepRollout})
	}
}

// next is when the next round is due: every tick while a replica moves,
// an ordinal below want has none, or a request waits; every quietRound
// otherwise.
func (op *ordinalPlanner) next(want int) time.Duration {
	if len(op.p.steps) > 0 || op.obs.load.InFlight > 0 || op.obs.load.Queued > 0 || op.v.woken || len(op.byOrd) < want {
		return tick
	}
	for _, r := range op.reps {
		if r.state != StateReady && r.state != StateFrozen && r.state != StateDead {
			return tick
		}
	}
	return quietRound
}
