package serving

import (
	"fmt"
	"sort"
	"time"

	"github.com/shoal-run/shoal/internal/autoscale"
	"github.com/shoal-run/shoal/internal/manifest"
	"github.com/shoal-run/shoal/internal/route"
)

// A reconcile round is decide → plan → apply: the controller takes a view
// of the app under ctl.mu and what it observed (the load, the autoscaler's
// decision), decide turns them into a plan, a pure function of its inputs
// (no lock, no call out, the clock passed in), and apply carries the plan
// out through the ladder's moves, still under ctl.mu.

// repView is what decide sees of a replica.
type repView struct {
	id       string
	rev      int
	state    State
	node     string
	draining bool // its node (of a cluster) is draining: it moves elsewhere
	ord      int  // its ordinal in a stateful app (-1: none)
	started  time.Time
	active   time.Time // its last request
	frozen   time.Time // when it froze
	// replacement is the fresh replica that is to take its place, and
	// that one's state (StateGone: no longer there).
	replacement      string
	replacementState State
}

// view is what decide sees of an app.
type view struct {
	cfg      manifest.Config // the current revision's
	min, max int
	revision int // the current one
	traffic  []trafficShare
	rollout  *rollout // the last revision's, nil when none
	// roFailures counts the failed replicas of the revision being rolled
	// out; roAllowed is how many its health check allows, roErr set when
	// that revision cannot be read.
	roFailures int
	roAllowed  int
	roErr      error
	lastErr    string
	reps       []repView // by id
	desired    int       // the replica count decided last
	backoff    time.Time // no new replica before this
	woken      bool      // a request waits for a ready replica
	floor      selfFloor
	// ordWait are a stateful app's ordinals that may not start, and why:
	// the node that holds their volumes is not live (no reseed).
	ordWait map[int]string
	// premade is the app's premade replica (the pre-made tier), premadeOK
	// whether the tier may keep one for the app now.
	premade   premadeView
	premadeOK bool
	// restorable is the revision the app's checkpoint restores (0:
	// none): its next start of that revision restores the checkpoint
	// rather than take a premade replica, and none is kept meanwhile.
	restorable int
}

// premadeView is what decide sees of an app's premade replica.
type premadeView struct {
	id    string // "": none
	rev   int
	made  bool      // its sandbox is made: a start may take it
	began time.Time // its making began
}

// premadeWait bounds how long after its making began a start waits for a
// premade replica being made rather than start one of its own: begun
// before the start, it is ready sooner, unless its making is stuck.
const premadeWait = time.Second

// observation is what the controller observed for a round: the app's
// load, and what the autoscaler asked for.
type observation struct {
	load  route.Load
	scale autoscale.Decision
}

// stepKind is what a plan's step does to a replica.
type stepKind int

const (
	stepThaw      stepKind = iota // thaw replica id
	stepStart                     // start a replica of rev (in place of id, when set)
	stepUnreplace                 // replica id's replacement is gone: another may start
	stepFreeze                    // freeze replica id
	stepDrain                     // drain replica id, then stop it
	stepStop                      // stop replica id
	stepRollout                   // the rollout moves on (plan.rollout)
	stepPremake                   // make a replica of rev ahead (the pre-made tier)
	stepUnpremake                 // drop premade replica id
)

func (k stepKind) String() string {
	return [...]string{"thaw", "start", "unreplace", "freeze", "drain", "stop", "rollout", "premake", "unpremake"}[k]
}

// planStep is one step of a plan.
type planStep struct {
	kind stepKind
	id   string
	rev  int
	why  string
	// ordered starts ordinal of a stateful app (decide_stateful.go).
	ordered bool
	ordinal int
	dump    bool // stepStop: a frozen replica's stop, by a checkpoint to disk where it may be
	// premade, in a start, is the premade replica it takes.
	premade string
}

func (s planStep) String() string {
	switch s.kind {
	case stepStart:
		if s.ordered {
			return fmt.Sprintf("start %d as ordinal %d: %s", s.rev, s.ordinal, s.why)
		}
		from := ""
		if s.premade != "" {
			from = " from " + s.premade
		}
		if s.id != "" {
			return fmt.Sprintf("start %d%s for %s: %s", s.rev, from, s.id, s.why)
		}
		return fmt.Sprintf("start %d%s: %s", s.rev, from, s.why)
	case stepRollout:
		return "rollout"
	case stepPremake:
		return fmt.Sprintf("premake %d: %s", s.rev, s.why)
	}
	return fmt.Sprintf("%s %s: %s", s.kind, s.id, s.why)
}

// rolloutPlan is how a round moves the rollout in progress on.
type rolloutPlan struct {
	ready, want int
	progress    bool   // ready or want changed
	event       bool   // the change is worth an event
	done        string // every replica wanted is ready: why traffic moves to it ("" not yet)
	hold        bool   // done takes replicas out of service: stored before routed
	took        time.Duration
	end         string // it never became ready: why it ends ("" it goes on)
}

// plan is what a round decided.
type plan struct {
	// want is the app's replica count, cause and reason why; scale is
	// set when it differs from the one decided last.
	want          int
	cause, reason string
	inputs        map[string]float64
	scale         bool
	unwake        bool // a replica is ready: no request waits any more
	floorLapses   bool // the count the app asked for lapses
	cpu           map[string]float64
	cpuWhy        string
	steps         []planStep
	rollout       rolloutPlan
	next          time.Duration // when the next round is due (0: when something happens)
	waiting       string        // what keeps a stateful app's ordinal from starting ("": nothing)
}

// revView is one revision's replicas as a round sees them.
type revView struct {
	starting, ready, frozen []*repView
	freezing                int // being frozen or thawed
}

func (s *revView) active() int {
	if s == nil {
		return 0
	}
	return len(s.starting) + len(s.ready)
}

// weightsOf maps each revision that takes traffic to its percent: ts, or
// all of it to the current revision.
func weightsOf(ts []trafficShare, current int) map[int]int {
	w := make(map[int]int, len(ts)+1)
	for _, t := range ts {
		if t.Percent > 0 {
			w[t.Revision] += t.Percent
		}
	}
	if len(w) == 0 && current > 0 {
		w[current] = 100
	}
	return w
}

// classify sorts replicas by revision and state.
func classify(reps []*repView) map[int]*revView {
	sets := map[int]*revView{}
	for _, r := range reps {
		s := sets[r.rev]
		if s == nil {
			s = &revView{}
			sets[r.rev] = s
		}
		switch r.state {
		case StatePending, StateStarting:
			s.starting = append(s.starting, r)
		case StateFreezing, StateThawing:
			s.freezing++ // ready once its freeze or thaw is done
		case StateReady:
			s.ready = append(s.ready, r)
		case StateFrozen:
			s.frozen = append(s.frozen, r)
		}
	}
	return sets
}

// counted is what the autoscaler is told of an app in view v: how many
// replicas of the revisions that take traffic are active (starting or
// ready), and the ids of the ready ones.
func (v view) counted() (active int, ready []string) {
	w := weightsOf(v.traffic, v.revision)
	for _, r := range v.reps {
		if w[r.rev] == 0 {
			continue
		}
		switch r.state {
		case StatePending, StateStarting:
			active++
		case StateReady:
			active++
			ready = append(ready, r.id)
		}
	}
	return active, ready
}

// planner is decide at work: a copy of the view's replicas, moved as the
// plan's steps would move them.
type planner struct {
	v    view
	obs  observation
	now  time.Time
	reps map[string]*repView
	p    plan
	// premadeTaken: a start of the plan takes the premade replica, or
	// (premadeWaits) waits for it to be made.
	premadeTaken, premadeWaits bool
}

// decide plans a reconcile round: the app's replica count (the
// autoscaler's, overridden by idleness, a waiting request, the self API,
// halted replicas, the bounds and the traffic split), the moves that
// converge the replicas of each revision that takes traffic to their
// share, the rollout's progress, the retirement of the revisions that
// take no traffic, and when the next round is due.
func decide(v view, obs observation, now time.Time) plan {
	if v.cfg.Stateful.Enabled() {
		return decideStateful(v, obs, now)
	}
	pl := &planner{v: v, obs: obs, now: now, reps: make(map[string]*repView, len(v.reps))}
	list := make([]*repView, len(v.reps))
	for i := range v.reps {
		r := v.reps[i]
		list[i] = &r
		pl.reps[r.id] = &r
	}
	sort.Slice(list, func(i, j int) bool { return list[i].id < list[j].id })
	sets := classify(list)
	weights := weightsOf(v.traffic, v.revision)
	revs := make([]int, 0, len(weights))
	active := 0
	var ready int
	for rev := range weights {
		revs = append(revs, rev)
		active += sets[rev].active()
		if s := sets[rev]; s != nil {
			ready += len(s.ready)
		}
	}
	sort.Ints(revs)
	pl.count(active, ready, len(weights))
	for id, q := range obs.scale.CPU {
		if r := pl.reps[id]; r != nil && r.state.listed() == StateReady {
			if pl.p.cpu == nil {
				pl.p.cpu = map[string]float64{}
			}
			pl.p.cpu[id] = q
		}
	}
	pl.p.cpuWhy = obs.scale.Reason
	want := pl.p.want
	wants := split(want, weights, min(want, 1))
	least := split(v.min, weights, min(v.min, 1))
	for _, rev := range revs {
		if sets[rev] == nil {
			sets[rev] = &revView{}
		}
		pl.serve(rev, sets[rev], wants[rev], least[rev])
	}
	surge := pl.rolloutStep(sets, weights, active)
	if pl.p.rollout.done != "" {
		weights = map[int]int{v.rollout.Revision: 100}
	}
	pl.retire(sets, weights, surge)
	pl.premake(sets, weights)
	pl.p.next = pl.next(list, weights)
	return pl.p
}

// count decides the app's replica count; active replicas of the
// revisions that take traffic are starting or ready, ready of them ready;
// split is how many revisions take traffic.
func (pl *planner) count(active, ready, split int) {
	v, load, dec, now := pl.v, pl.obs.load, pl.obs.scale, pl.now
	cfg := v.cfg
	want, reason := dec.Replicas, dec.Reason
	// cause is the decision's reason as a metric label: what set want last.
	cause := causeAutoscaler
	if dec.Panic {
		cause = causePanic
	}
	// The autoscaler remembers its window; an app that has had no request
	// for idle_timeout does not grow on that memory (its idle replicas
	// would freeze and thaw in turn).
	// An app scaled on its own metric may work without requests.
	if cfg.Scale.Metric == "" && want > active && load.InFlight == 0 && now.Sub(load.LastRequest) >= cfg.Scale.IdleTimeout.Duration {
		reason = fmt.Sprintf("no request for idle_timeout %s, so not the %d the autoscaler's window still asks", cfg.Scale.IdleTimeout.Duration, want)
		want, cause = active, causeIdle
	}
	if ready > 0 {
		pl.p.unwake = true
	} else if (v.woken || load.Queued > 0) && want < 1 {
		want, reason, cause = 1, "a request is waiting for a replica", causeWaiting
	}
	floor := v.floor
	if w, r := floor.apply(now, load, cfg.Scale.IdleTimeout.Duration, want, reason); r != reason {
		want, reason, cause = w, r, causeSelf
	}
	pl.p.floorLapses = floor.n != v.floor.n
	halted := 0
	for _, r := range v.reps {
		if r.state == StateHalted {
			halted++
		}
	}
	if w, r := capHalted(want, reason, halted, v.max); w != want {
		want, reason, cause = w, r, causeHalted
	}
	if w := clamp(want, v.min, v.max); w != want {
		if w > want { // why fewer no longer matters
			reason = fmt.Sprintf("[scale] min is %d", v.min)
		} else {
			reason = fmt.Sprintf("%s; [scale] max is %d", reason, v.max)
		}
		want, cause = w, causeBounds
	}
	// Each revision that takes traffic keeps a replica while the app is
	// active (split's floor): the count says what runs, so that the
	// autoscaler, seeing that many, does not ask for fewer again and again.
	if want > 0 && want < split {
		want, cause = split, causeSplit
		reason = fmt.Sprintf("%s; each of the %d revisions that take traffic keeps a replica", reason, split)
	}
	pl.p.want, pl.p.cause, pl.p.reason, pl.p.inputs = want, cause, reason, dec.Inputs
	pl.p.scale = want != v.desired
}

// count counts the plan's steps of kind k.
func (p plan) count(k stepKind) int {
	n := 0
	for _, s := range p.steps {
		if s.kind == k {
			n++
		}
	}
	return n
}

func (pl *planner) add(s planStep) { pl.p.steps = append(pl.p.steps, s) }

// thaw plans the thaw of frozen replica r, ready (to the plan) at once.
func (pl *planner) thaw(r *repView, s *revView) {
	r.state = StateThawing
	s.ready = append(s.ready, r)
	pl.add(planStep{kind: stepThaw, id: r.id, why: "needed to serve"})
}

// start plans the start of a replica of rev, in place of replica instead
// when set.
func (pl *planner) start(rev int, instead, why string) {
	s := planStep{kind: stepStart, rev: rev, id: instead, why: why}
	if pm := pl.v.premade; pm.id != "" && pm.rev == rev && !pl.premadeTaken && pl.v.restorable != rev {
		switch {
		case pm.made:
			s.premade, pl.premadeTaken = pm.id, true
		case instead == "" && pl.now.Before(pm.began.Add(premadeWait)):
			// Being made: the round after it is (the node's Premake
			// returning wakes it), or premadeWait after it began,
			// starts this one.
			pl.premadeTaken, pl.premadeWaits = true, true
			return
		}
	}
	pl.add(s)
}

// premake keeps the app's next replica made ahead while the app is at
// zero replicas of its current revision (the pre-made tier): it drops a
// premade replica of another revision, or one the tier may not keep (the
// app has replicas, or the budget keeps those of more recently used
// apps), and plans one when there is none.
func (pl *planner) premake(sets map[int]*revView, weights map[int]int) {
	v := pl.v
	pm := v.premade
	if pl.premadeTaken {
		return
	}
	if pm.id != "" {
		switch {
		case pm.rev != v.revision:
			pl.add(planStep{kind: stepUnpremake, id: pm.id, why: fmt.Sprintf("revision %d is the app's current", v.revision)})
		case v.restorable == v.revision:
			pl.add(planStep{kind: stepUnpremake, id: pm.id, why: "the app's checkpoint restores its next replica"})
		case !v.premadeOK:
			pl.add(planStep{kind: stepUnpremake, id: pm.id, why: "the app has replicas, or the budget keeps those of more recently used apps"})
		default:
			return
		}
	}
	if !v.premadeOK || weights[v.revision] == 0 || v.restorable == v.revision {
		return
	}
	if s := sets[v.revision]; s != nil && s.active()+len(s.frozen)+s.freezing > 0 {
		return
	}
	for _, s := range pl.p.steps {
		if s.kind == stepStart && s.rev == v.revision {
			return
		}
	}
	pl.add(planStep{kind: stepPremake, rev: v.revision, why: "the app is at zero replicas"})
}

// fresh reports whether r may go on serving: it is not past max_lifetime,
// nor on a draining node.
func (pl *planner) fresh(r *repView) bool {
	life := pl.v.cfg.Scale.MaxLifetime.Duration
	return (life == 0 || pl.now.Sub(r.started) < life) && !r.draining
}

// staleWhy says why replica r, not fresh, goes: its node drains, or it is
// past max_lifetime.
func staleWhy(r *repView, prefix string) string {
	if r.draining {
		return "node " + r.node + " is draining"
	}
	return prefix + "past max_lifetime"
}

// serve converges the replicas of a revision that takes traffic to want
// (never below least).
func (pl *planner) serve(rev int, s *revView, want, least int) {
	cfg, now := pl.v.cfg, pl.now
	backedOff := now.After(pl.v.backoff)
	active := s.active()
	// Scale out: thaw frozen replicas (most recently used first), then
	// start new ones.
	frozen := append([]*repView(nil), s.frozen...)
	sort.SliceStable(frozen, func(i, j int) bool { return frozen[i].active.After(frozen[j].active) })
	for len(frozen) > 0 && active < want {
		r := frozen[0]
		frozen = frozen[1:]
		if !pl.fresh(r) {
			continue
		}
		pl.thaw(r, s)
		active++
	}
	for n := active + s.freezing; n < want && backedOff; n++ {
		pl.start(rev, "", "scale out")
		active++
	}

	// Replace ready replicas past max_lifetime: one fresh replica each, and
	// the old one drains once the fresh one is ready.
	for _, r := range s.ready {
		if pl.fresh(r) {
			continue
		}
		if r.replacement == "" && backedOff {
			pl.start(rev, r.id, "replace "+r.id+": "+staleWhy(r, ""))
			r.replacement, r.replacementState = "(new)", StatePending
		}
		switch {
		case r.replacement == "":
		case r.replacementState == StateGone || r.replacementState.listed() == StateFailed:
			r.replacement = ""
			pl.add(planStep{kind: stepUnreplace, id: r.id})
		case r.replacementState == StateReady:
			r.state = StateDraining
			pl.add(planStep{kind: stepDrain, id: r.id, why: "replaced by " + r.replacement})
			active--
		}
	}

	// Scale in and idle: ready replicas with nothing to do freeze, the
	// least recently used first, but never below the minimum.
	sort.SliceStable(s.ready, func(i, j int) bool { return s.ready[i].active.Before(s.ready[j].active) })
	for _, r := range s.ready {
		if r.state != StateReady || active <= least {
			continue
		}
		idle := now.Sub(r.active) >= cfg.Scale.IdleTimeout.Duration && (cfg.Scale.Metric == "" || want == 0)
		// The autoscaler may shrink the app to one replica; the last one
		// goes only when idle for idle_timeout.
		if (idle || active > max(want, 1)) && pl.obs.load.Endpoints[r.id].InFlight == 0 {
			why := "idle for " + cfg.Scale.IdleTimeout.Duration.String()
			if !idle {
				why = "scale in"
			}
			r.state = StateFreezing
			pl.add(planStep{kind: stepFreeze, id: r.id, why: why})
			active--
		}
	}

	// Frozen replicas stop after freeze_timeout, or at once past
	// max_lifetime.
	for _, r := range s.frozen {
		if r.state != StateFrozen {
			continue
		}
		if !pl.fresh(r) {
			pl.stop(r, staleWhy(r, "frozen "))
		} else if now.Sub(r.frozen) >= cfg.Scale.FreezeTimeout.Duration {
			r.state = StateStopped
			pl.add(planStep{kind: stepStop, id: r.id, why: "frozen for " + cfg.Scale.FreezeTimeout.Duration.String(), dump: true})
		}
	}
}

func (pl *planner) stop(r *repView, why string) {
	r.state = StateStopped
	pl.add(planStep{kind: stepStop, id: r.id, why: why})
}

// rolloutStep moves the rollout in progress on: the new revision's
// replicas start beside the ones in service (as many as those, at least
// min, at least one while the app is in use), and once they are all ready
// traffic moves to it. A revision whose replicas fail `failures` times
// before that is rolled back. It returns the revision that surges (starts
// replicas without taking traffic), or 0; active counts the replicas of
// the revisions that take traffic as the round began.
func (pl *planner) rolloutStep(sets map[int]*revView, weights map[int]int, active int) int {
	v, now, load := pl.v, pl.now, pl.obs.load
	ro := v.rollout
	if !progressing(ro) {
		return 0
	}
	rev := ro.Revision
	s := sets[rev]
	if s == nil {
		s = &revView{}
		sets[rev] = s
	}
	others := active - s.active()
	if weights[rev] == 0 {
		others = active
	}
	want := max(others, v.min)
	if want == 0 && (load.InFlight > 0 || load.Queued > 0 || v.woken) {
		want = 1
	}
	want = clamp(want, 0, v.max)
	rp := &pl.p.rollout
	switch {
	case v.roErr != nil:
		rp.end = fmt.Sprintf("revision %d cannot be read: %v", rev, v.roErr)
	case v.roFailures >= max(v.roAllowed, 1):
		rp.end = fmt.Sprintf("%d replicas of revision %d failed before it was ready: %s", v.roFailures, rev, v.lastErr)
	}
	if rp.end != "" {
		pl.add(planStep{kind: stepRollout})
		return 0
	}
	surge := 0
	if weights[rev] == 0 {
		surge = rev
		n := s.active()
		frozen := append([]*repView(nil), s.frozen...)
		sort.SliceStable(frozen, func(i, j int) bool { return frozen[i].active.After(frozen[j].active) })
		for _, r := range frozen {
			if n >= want {
				break
			}
			pl.thaw(r, s)
			n++
		}
		for ; n+s.freezing < want && now.After(v.backoff); n++ {
			pl.start(rev, "", fmt.Sprintf("rollout of revision %d", rev))
		}
	}
	ready := len(s.ready)
	if ready != ro.Ready || want != ro.Want {
		rp.progress, rp.event = true, ready != ro.Ready && ready < want
	}
	rp.ready, rp.want = ready, want
	if rp.progress {
		pl.add(planStep{kind: stepRollout})
	}
	if ready < want {
		return surge
	}
	// Every replica wanted is ready: traffic moves over.
	rp.took = now.Sub(ro.StartedAt).Round(time.Millisecond)
	rp.done = fmt.Sprintf("%d/%d ready after %s", ready, want, rp.took)
	if ro.From > 0 && weights[rev] == 0 {
		rp.done += fmt.Sprintf("; traffic moved from revision %d", ro.From)
	}
	// The route without the revisions that leave goes out once the store
	// holds the switch: a daemon killed in between would route them again.
	rp.hold = len(weights) > 1 || weights[rev] == 0
	if !rp.progress {
		pl.add(planStep{kind: stepRollout})
	}
	return 0
}

// retire takes the replicas of revisions that take no traffic (other than
// surge, the one being rolled out) out of service: ready ones drain and
// freeze, so a rollback thaws them, and stay frozen for rollback_grace;
// starting ones stop.
func (pl *planner) retire(sets map[int]*revView, weights map[int]int, surge int) {
	grace := pl.v.cfg.Scale.RollbackGrace.Duration
	revs := make([]int, 0, len(sets))
	for rev := range sets {
		revs = append(revs, rev)
	}
	sort.Ints(revs)
	for _, rev := range revs {
		s := sets[rev]
		if weights[rev] > 0 || rev == surge {
			continue
		}
		for _, r := range s.ready {
			if r.state == StateReady {
				r.state = StateFreezing
				pl.add(planStep{kind: stepFreeze, id: r.id, why: fmt.Sprintf("revision %d takes no traffic; kept frozen for %s for a rollback", rev, grace)})
			}
		}
		for _, r := range s.starting {
			pl.stop(r, fmt.Sprintf("revision %d takes no traffic", rev))
		}
		for _, r := range s.frozen {
			if r.state == StateFrozen && pl.now.Sub(r.frozen) >= grace {
				pl.stop(r, fmt.Sprintf("revision %d took no traffic for rollback_grace (%s)", rev, grace))
			}
		}
	}
}

// next is when the next round is due: every tick while the app has
// traffic or replicas on the move; while its replicas are ready or frozen
// and it has had no request for quietAfter, every quietRound until it has
// settled (quietSettle without a request or a new replica: the
// autoscaler's windows and delays, a raised CPU quota's hold, are over),
// then every quietLong, or sooner at the next idle_timeout, max_lifetime
// or lapse of the count asked through the self API, so that thousands of
// idle ready apps cost little (the Manager's sweep wakes a quiet app at
// once when a request comes, quiet.go); at the next freeze_timeout (or
// rollback_grace) while it only has frozen replicas (thousands of idle
// apps cost nothing), and never (0) when it has none.
func (pl *planner) next(reps []*repView, weights map[int]int) time.Duration {
	if pl.premadeWaits {
		return min(tick, pl.v.premade.began.Add(premadeWait).Sub(pl.now))
	}
	load := pl.obs.load
	if load.InFlight > 0 {
		return tick
	}
	for _, s := range pl.p.steps {
		if s.kind == stepStart {
			return tick
		}
	}
	cfg := pl.v.cfg
	quiet := load.Queued == 0 && !pl.v.woken && len(pl.p.steps) == 0 && !pl.p.scale && len(pl.p.cpu) == 0 &&
		pl.now.Sub(load.LastRequest) >= quietAfter
	round := quietRound
	if quiet {
		last := load.LastRequest
		for _, r := range reps {
			if r.state == StateReady {
				last = latest(last, r.started, r.active)
			}
		}
		if pl.now.Sub(last) >= quietSettle {
			round = quietLong
		}
		if pl.v.floor.n > 0 {
			round = min(round, max(cfg.Scale.IdleTimeout.Duration-pl.now.Sub(load.LastRequest), tick))
		}
	}
	var next time.Duration
	for _, r := range reps {
		if r.state == StateReady && quiet && r.replacement == "" {
			left := round
			// Past idle_timeout and still ready, it is kept (min): no
			// deadline.
			if idle := cfg.Scale.IdleTimeout.Duration - pl.now.Sub(r.active); idle > 0 && idle < left {
				left = max(idle, tick)
			}
			if life := cfg.Scale.MaxLifetime.Duration; life > 0 {
				left = min(left, max(life-pl.now.Sub(r.started), tick))
			}
			if next == 0 || left < next {
				next = left
			}
			continue
		}
		if r.state != StateFrozen {
			return tick
		}
		limit := cfg.Scale.FreezeTimeout.Duration
		if weights[r.rev] == 0 {
			limit = cfg.Scale.RollbackGrace.Duration
		}
		left := max(limit-pl.now.Sub(r.frozen), tick)
		if next == 0 || left < next {
			next = left
		}
	}
	return next
}

// latest is the latest of ts.
func latest(ts ...time.Time) time.Time {
	var l time.Time
	for _, t := range ts {
		if t.After(l) {
			l = t
		}
	}
	return l
}
