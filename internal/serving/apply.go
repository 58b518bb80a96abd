package serving

import (
	"fmt"
	"sort"
	"time"

	"github.com/shoal-run/shoal/internal/autoscale"
	"github.com/shoal-run/shoal/internal/route"
)

// touch marks the ready replicas that served since the last round (or
// serve now) as active. ctl.mu is held.
func (ctl *appCtl) touch(now time.Time, load route.Load) {
	for _, r := range ctl.reps {
		if r.state != StateReady {
			continue
		}
		if el, ok := load.Endpoints[r.rec.ID]; ok {
			if el.LastRequest.After(r.lastActive) {
				r.lastActive = el.LastRequest
			}
			if el.InFlight > 0 {
				r.lastActive = now
			}
		}
	}
}

// view is the app as decide sees it. ctl.mu is held.
func (ctl *appCtl) view() view {
	v := view{cfg: ctl.rec.Config, min: ctl.rec.Min, max: ctl.rec.Max, revision: ctl.rec.Revision,
		traffic: ctl.rec.Traffic, rollout: ctl.rec.Rollout, roFailures: ctl.roFailures, lastErr: ctl.lastErr,
		desired: ctl.desired, backoff: ctl.backoff, woken: ctl.woken.Load(), floor: ctl.floor,
		reps: make([]repView, 0, len(ctl.reps)), premadeOK: ctl.premadeOK}
	if pm := ctl.premade; pm != nil {
		v.premade = premadeView{id: pm.r.rec.ID, rev: pm.r.rec.Revision, made: pm.made, began: pm.r.rec.StartedAt}
	}
	if c := ctl.ckpt; c != nil {
		v.restorable = c.rev
	}
	v.ordWait = ctl.ordinalsWaiting()
	if progressing(v.rollout) {
		cfg, _, err := ctl.configOf(v.rollout.Revision)
		v.roAllowed, v.roErr = cfg.Health.Failures, err
	}
	for id, r := range ctl.reps {
		rv := repView{id: id, rev: r.rec.Revision, state: r.state, node: r.rec.Node, draining: ctl.m.draining(r.rec.Node),
			started: r.rec.StartedAt, active: r.lastActive, frozen: r.frozenAt, replacement: r.replacement, ord: -1}
		if r.rec.Ordinal != nil {
			rv.ord = *r.rec.Ordinal
		}
		if r.replacement != "" {
			rv.replacementState = StateGone
			if nr := ctl.reps[r.replacement]; nr != nil {
				rv.replacementState = nr.state
			}
		}
		v.reps = append(v.reps, rv)
	}
	sort.Slice(v.reps, func(i, j int) bool { return v.reps[i].id < v.reps[j].id })
	return v
}

// autoscale feeds the app's load to its autoscaler and asks it for the
// replica count and CPU quotas, from the throttling of the ready
// replicas (usage). ctl.mu is held.
func (ctl *appCtl) autoscale(now time.Time, v view, load route.Load, usage map[string]cpuUsage) autoscale.Decision {
	active, ids := v.counted()
	ready := make([]*replica, 0, len(ids))
	for _, id := range ids {
		ready = append(ready, ctl.reps[id])
	}
	ctl.scaler.observe(now, load, metricSum(v.cfg.Scale.Metric, now, ready))
	return ctl.ask(active, ready, usage)
}

// apply carries plan p out: its CPU changes once ctl.mu is released, its
// count, then its steps (applySteps). ctl.mu is held.
func (ctl *appCtl) apply(now time.Time, p plan) {
	for id, q := range p.cpu {
		r := ctl.reps[id]
		ctl.queue(action{kind: actSetCPU, r: r, cpu: q, why: p.cpuWhy})
	}
	if p.unwake {
		ctl.woken.Store(false)
	}
	if p.floorLapses {
		ctl.floor.n = 0
	}
	if p.scale {
		ctl.m.metrics.decision(ctl.name, p.want > ctl.desired, p.cause)
		ctl.m.emit("scale", ctl.name, "", fmt.Sprintf("%d → %d replicas: %s", ctl.desired, p.want, p.reason), p.inputs)
		ctl.desired = p.want
	}
	ctl.wait(p.waiting)
	ctl.applySteps(now, p)
	ctl.clearRemains() // after the starts above
}

// applySteps carries plan p's steps out, in order, each a move on the
// ladder (whose node calls wait for ctl.mu to be released, see unlock),
// and returns the ids of the replicas it started. ctl.mu is held.
func (ctl *appCtl) applySteps(now time.Time, p plan) (started []string) {
	for _, s := range p.steps {
		r := ctl.reps[s.id]
		if r == nil && s.kind != stepStart && s.kind != stepRollout && s.kind != stepPremake && s.kind != stepUnpremake {
			continue
		}
		switch s.kind {
		case stepThaw:
			ctl.thaw(r)
		case stepStart:
			id := ""
			if s.premade != "" {
				id = ctl.takePremade(s.premade, s.rev, s.why)
			}
			if id == "" {
				ord := -1
				if s.ordered {
					ord = s.ordinal
				}
				id = ctl.startReplica(s.rev, s.why, ord)
			}
			if id != "" {
				started = append(started, id)
			}
			if r != nil {
				r.replacement = id
			}
		case stepUnreplace:
			r.replacement = ""
		case stepFreeze:
			ctl.freeze(r, s.why)
		case stepDrain:
			ctl.drain(r, s.why)
		case stepStop:
			if s.dump {
				ctl.checkpointOrStop(r, s.why)
			} else {
				ctl.stopReplica(r, s.why)
			}
		case stepRollout:
			ctl.moveRollout(now, p.rollout)
		case stepPremake:
			ctl.premake(s.rev, s.why)
		case stepUnpremake:
			ctl.unpremake(s.why)
		}
	}
	return started
}

// moveRollout moves the rollout in progress on as rp says. ctl.mu is
// held.
func (ctl *appCtl) moveRollout(now time.Time, rp rolloutPlan) {
	if rp.end != "" {
		ctl.endRollout(now, rp.end)
		return
	}
	// A record others may hold a copy of is never changed in place.
	ro := new(rollout)
	*ro = *ctl.rec.Rollout
	ctl.rec.Rollout = ro
	rev := ro.Revision
	if rp.progress {
		if rp.event {
			ctl.m.emit("rollout", ctl.name, "", fmt.Sprintf("revision %d: %d/%d ready", rev, rp.ready, rp.want),
				map[string]float64{"ready": float64(rp.ready), "want": float64(rp.want)})
		}
		ro.Ready, ro.Want = rp.ready, rp.want
		ctl.recChanged()
	}
	if rp.done == "" {
		return
	}
	ro.State, ro.DoneAt, ro.Reason = rolloutDone, &now, rp.done
	ctl.rec.Traffic = []trafficShare{{Revision: rev, Percent: 100}}
	ctl.roFailures = 0
	ctl.saveApp()
	if rp.hold {
		ctl.hold()
	}
	ctl.publish()
	ctl.m.emit("rollout", ctl.name, "", fmt.Sprintf("revision %d rolled out: %s", rev, ro.Reason),
		map[string]float64{"ready": float64(rp.ready), "want": float64(rp.want), "seconds": rp.took.Seconds()})
}

func clamp(v, lo, hi int) int {
	if v < lo {
		v = lo
	}
	if hi > 0 && v > hi {
		v = hi
	}
	return v
}
