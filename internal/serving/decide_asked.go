package serving

import (
	"fmt"
	"sort"
	"time"

	"github.com/shoal-run/shoal/internal/appapi"
	"github.com/shoal-run/shoal/internal/route"
)

// Decisions asked for by a request rather than a reconcile round: a
// rollback, and a replica's replicate through the self API. Like decide
// they are pure: a view in, a plan (or a refusal) out, carried out by
// applySteps under ctl.mu.

// decideRollback plans a rollback to revision to of the app in view v,
// taken before it: as many replicas of to as the app has in service (one
// at least while a request is in flight or waits; within min and max),
// its frozen replicas thawed, most recently used first, the rest
// started. The plan's want is that count.
func decideRollback(v view, load route.Load, to int) plan {
	if v.cfg.Stateful.Enabled() {
		// A stateful app's ordinals go back one at a time, as a rolling
		// upgrade to the revision made current (decideStateful).
		return plan{want: v.max}
	}
	need, _ := v.counted()
	if need == 0 && (load.InFlight > 0 || v.woken) {
		need = 1
	}
	need = clamp(need, v.min, v.max)
	var frozen []repView
	active := 0
	for _, r := range v.reps {
		if r.rev != to {
			continue
		}
		switch r.state {
		case StateFrozen:
			frozen = append(frozen, r)
		case StateReady, StateStarting, StatePending:
			active++
		}
	}
	sort.SliceStable(frozen, func(i, j int) bool { return frozen[i].active.After(frozen[j].active) })
	p := plan{want: need}
	why := fmt.Sprintf("rollback to revision %d", to)
	for _, r := range frozen {
		if active >= need {
			break
		}
		p.steps = append(p.steps, planStep{kind: stepThaw, id: r.id, why: why})
		active++
	}
	for ; active < need; active++ {
		p.steps = append(p.steps, planStep{kind: stepStart, rev: to, why: why})
	}
	return p
}

// decideReplicate plans what replica caller's replicate asks of the app
// in view v: one replica more of the caller's revision while it takes
// traffic (a traffic split keeps its shares), else of the current one; a
// frozen replica thawed, the most recently used, else one started. It is
// refused while the caller is on its way out, when the app runs its max
// (halted replicas still run, so they count), and, for a start, while
// the app backs off. The plan's want is the count the app asks for: the
// replicas serving, and the new one.
func decideReplicate(v view, caller string, now time.Time) (plan, error) {
	app := v.cfg.Name
	var me *repView
	serving, halted := 0, 0
	for i := range v.reps {
		r := &v.reps[i]
		if r.id == caller {
			me = r
		}
		switch r.state {
		case StatePending, StateStarting, StateReady:
			serving++
		case StateHalted:
			halted++
		}
	}
	switch {
	case v.cfg.Stateful.Enabled():
		return plan{}, appapi.Refuse("state", "app %s is stateful: it runs its ordinals (stateful.replicas; shoal app scale changes the count)", app)
	case me == nil:
		return plan{}, appapi.Refuse("state", "replica %s is gone", caller)
	case me.state.exiting():
		return plan{}, appapi.Refuse("state", "replica %s is %s", caller, me.state.listed())
	case serving+halted >= v.max:
		return plan{}, appapi.Refuse("max", "app %s already runs %d replica(s) (%d serving, %d halted), its max is %d",
			app, serving+halted, serving, halted, v.max)
	}
	rev := me.rev
	if weightsOf(v.traffic, v.revision)[rev] == 0 {
		rev = v.revision
	}
	p := plan{want: serving + 1, cause: causeSelf}
	var thaw *repView
	for i := range v.reps {
		r := &v.reps[i]
		if r.state == StateFrozen && r.rev == rev && (thaw == nil || r.active.After(thaw.active)) {
			thaw = r
		}
	}
	switch {
	case thaw != nil:
		p.steps = []planStep{{kind: stepThaw, id: thaw.id, why: "replicate asked by " + caller}}
	case now.Before(v.backoff):
		left := v.backoff.Sub(now)
		return plan{}, &appapi.Refusal{Reason: "backoff", RetryAfter: int(left/time.Second) + 1,
			Msg: fmt.Sprintf("app %s is backing off after failed replicas (%s more): %s", app, left.Round(time.Millisecond), v.lastErr)}
	default:
		p.steps = []planStep{{kind: stepStart, rev: rev, why: "replicate asked by " + caller}}
	}
	return p, nil
}
