// Package serving runs apps: it turns an app's shoal.toml into replicas
// (containers on the runtime), keeps each replica on the homeostasis ladder
// (starting, ready, frozen, stopped, draining), wakes apps for the proxy,
// applies the autoscaler's decisions and records what it does in the store.
package serving

import (
	"context"
	"fmt"
	"path/filepath"
	"sort"
	"sync"
	"sync/atomic"
	"time"

	"github.com/shoal-run/shoal/internal/route"
)

// tick is how often an app with running or frozen replicas samples its load
// and walks its replicas down the ladder.
const tick = 100 * time.Millisecond

// appCtl is the controller of one app: it holds the app's state on this
// node (appState) and decides, converging the app's replicas to what its
// config, the autoscaler and the proxy's wake-ups ask for; its driver
// carries the decisions out through the node.
type appCtl struct {
	appState
	m     *Manager
	lead  *lead    // the run of the controllers it belongs to
	node  Node     // where the app's replicas run
	drv   *driver  // carries out what the controller decides
	pub   routePub // orders the app's routes
	merge *merger  // merges the state of its replicas that are gone
	logs  replicaLogs

	wake    chan struct{} // the proxy has a request and no ready replica
	changed chan struct{} // a replica changed state
	stop    chan struct{}
	once    sync.Once

	roundAt atomic.Int64 // the clock (UnixNano) of the last reconcile round done, for tests
	woken   atomic.Bool  // a request is waiting for a ready replica

	// recMu orders writes of the app record: a writer takes it before
	// mu and holds it until its write is done.
	recMu sync.Mutex

	// Under mu:
	scaler     *scaler
	roFailures int       // failed replicas of the revision being rolled out
	failures   int       // replicas that failed since one was last ready
	strikes    int       // failures since a replica last stayed up for stableAfter
	backoff    time.Time // no new replica before this
	lastErr    string
	lastLog    []string
	desired    int
	floor      selfFloor // what the app asked for through the self API

	boots boots // replicas starting
}

func newAppCtl(m *Manager, rec appRecord, l *lead) *appCtl {
	ctl := &appCtl{
		appState: appState{name: rec.Config.Name, cluster: m.disp != nil, rec: rec, reps: map[string]*replica{}, unsaved: map[string]bool{},
			revs: map[int]revisionRecord{}, deleting: rec.Deleting, dirty: make(chan struct{}, 1)},
		m: m, lead: l, node: m.node,
		wake: make(chan struct{}, 1), changed: make(chan struct{}, 1), stop: make(chan struct{}),
	}
	ctl.drv = &driver{ctl}
	ctl.scaler = newScaler(rec, m.clock)
	ctl.logs = replicaLogs{dir: filepath.Join(m.appDir(ctl.name), "logs"), log: m.log}
	ctl.merge = &merger{app: ctl.name, dir: m.appDir(ctl.name), rt: m.o.Runtime, images: m.o.Images, clock: m.clock, log: m.log,
		emit: func(kind, replica, reason string, inputs map[string]float64) {
			m.emit(kind, ctl.name, replica, reason, inputs)
		},
		took:     func(policy string, d time.Duration) { m.metrics.merge(ctl.name, policy, d) },
		deleting: func() bool { ctl.mu.Lock(); defer ctl.unlock(); return ctl.deleting },
		wake:     make(chan struct{}, 1)}
	return ctl
}

// has reports whether id is one of the app's replicas.
func (ctl *appCtl) has(id string) bool {
	ctl.mu.Lock()
	defer ctl.unlock()
	return ctl.reps[id] != nil
}

func poke(ch chan struct{}) {
	select {
	case ch <- struct{}{}:
	default:
	}
}

func (ctl *appCtl) close() { ctl.once.Do(func() { close(ctl.stop) }) }

// loop runs reconcile whenever something happens, and every tick while the
// app has replicas.
func (ctl *appCtl) loop() {
	t := ctl.m.clock.NewTimer(tick)
	defer t.Stop()
	for {
		select {
		case <-ctl.stop:
			return
		case <-ctl.wake:
		case <-ctl.changed:
		case <-t.C():
		}
		next := ctl.reconcile()
		t.Stop()
		if next > 0 {
			t.Reset(next)
		}
	}
}

// reconcile converges the app's replicas one step. It returns when it wants
// to run next: every tick while the app has traffic or replicas in service,
// at the next freeze_timeout (or rollback_grace) while it only has frozen
// replicas (thousands of idle apps cost nothing), and never (0) when it has
// none.
func (ctl *appCtl) reconcile() time.Duration {
	m := ctl.m
	now := m.clock.Now()
	defer ctl.roundAt.Store(now.UnixNano())
	load := m.o.Router.Load(ctl.name)
	usage := ctl.usage()
	ctl.mu.Lock()
	defer ctl.unlock()
	if ctl.deleting {
		ctl.drv.clearRemains()
		return 0
	}
	cfg := ctl.rec.Config
	sets := map[int]*revSet{}
	set := func(rev int) *revSet {
		s := sets[rev]
		if s == nil {
			s = &revSet{}
			sets[rev] = s
		}
		return s
	}
	for _, r := range ctl.reps {
		s := set(r.rec.Revision)
		if r.busy {
			switch r.rec.State {
			case StateStarting, StatePending:
				if !r.stopping {
					s.starting = append(s.starting, r)
				}
			case StateReady:
				s.freezing++ // thawed as soon as its freeze is done
			case StateFrozen:
				if r.thawing {
					s.freezing++ // ready once ctl.mu is released
				}
			}
			continue
		}
		switch r.rec.State {
		case StateReady:
			if el, ok := load.Endpoints[r.rec.ID]; ok {
				if el.LastRequest.After(r.lastActive) {
					r.lastActive = el.LastRequest
				}
				if el.InFlight > 0 {
					r.lastActive = now
				}
			}
			s.ready = append(s.ready, r)
		case StateFrozen:
			s.frozen = append(s.frozen, r)
		}
	}
	// The revisions that take traffic share the autoscaler's count by their
	// weights; a revision being rolled out surges beside them.
	weights := ctl.weights()
	revs := make([]int, 0, len(weights))
	active := 0
	var ready []*replica
	for rev := range weights {
		revs = append(revs, rev)
		active += set(rev).active()
		ready = append(ready, set(rev).ready...)
	}
	sort.Ints(revs)
	ctl.scaler.observe(now, load, metricSum(cfg.Scale.Metric, now, ready))
	dec := ctl.decide(active, ready, usage)
	ctl.applyCPU(dec)
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
		want, cause = active, causeIdle
	}
	if len(ready) > 0 {
		ctl.woken.Store(false)
	} else if (ctl.woken.Load() || load.Queued > 0) && want < 1 {
		want, reason, cause = 1, "a request is waiting for a replica", causeWaiting
	}
	if w, r := ctl.floor.apply(now, load, cfg.Scale.IdleTimeout.Duration, want, reason); r != reason {
		want, reason, cause = w, r, causeSelf
	}
	if w, r := capHalted(want, reason, ctl.halted(), ctl.rec.Max); w != want {
		want, reason, cause = w, r, causeHalted
	}
	if w := clamp(want, ctl.rec.Min, ctl.rec.Max); w != want {
		want, cause = w, causeBounds
	}
	// Each revision that takes traffic keeps a replica while the app is
	// active (split's floor): the count says what runs, so that the
	// autoscaler, seeing that many, does not ask for fewer again and again.
	if want > 0 && want < len(weights) {
		want, cause = len(weights), causeSplit
		reason = fmt.Sprintf("%s; each of the %d revisions that take traffic keeps a replica", reason, len(weights))
	}
	if want != ctl.desired {
		m.metrics.decision(ctl.name, want > ctl.desired, cause)
		m.emit("scale", ctl.name, "", fmt.Sprintf("%d → %d replicas: %s", ctl.desired, want, reason), dec.Inputs)
		ctl.desired = want
	}
	wants := split(want, weights, min(want, 1))
	least := split(ctl.rec.Min, weights, min(ctl.rec.Min, 1))
	for _, rev := range revs {
		ctl.serve(now, rev, set(rev), wants[rev], least[rev], load)
	}
	surge := ctl.rolloutStep(now, sets, weights, active, load)
	weights = ctl.weights() // a rollout that ended moved the traffic
	ctl.retire(now, sets, weights, surge)
	ctl.drv.clearRemains() // after the starts above

	if load.InFlight > 0 {
		return tick
	}
	var next time.Duration
	for _, r := range ctl.reps {
		if r.rec.State != StateFrozen || r.busy {
			return tick
		}
		limit := cfg.Scale.FreezeTimeout.Duration
		if weights[r.rec.Revision] == 0 {
			limit = cfg.Scale.RollbackGrace.Duration
		}
		left := max(limit-now.Sub(r.frozenAt), tick)
		if next == 0 || left < next {
			next = left
		}
	}
	return next
}

// revSet is one revision's replicas as a reconcile round sees them.
type revSet struct {
	starting, ready, frozen []*replica
	freezing                int // ready replicas being frozen
}

func (s *revSet) active() int {
	if s == nil {
		return 0
	}
	return len(s.starting) + len(s.ready)
}

// serve converges the replicas of a revision that takes traffic to want
// (never below least). ctl.mu is held.
func (ctl *appCtl) serve(now time.Time, rev int, s *revSet, want, least int, load route.Load) {
	cfg := ctl.rec.Config
	// A replica past max_lifetime, or on a draining node of a cluster,
	// is replaced.
	fresh := func(r *replica) bool {
		return (cfg.Scale.MaxLifetime.Duration == 0 || now.Sub(r.rec.StartedAt) < cfg.Scale.MaxLifetime.Duration) &&
			!ctl.m.draining(r.rec.Node)
	}
	active := s.active()
	// Scale out: thaw frozen replicas (most recently used first), then
	// start new ones.
	frozen := append([]*replica(nil), s.frozen...)
	sort.Slice(frozen, func(i, j int) bool { return frozen[i].lastActive.After(frozen[j].lastActive) })
	for len(frozen) > 0 && active < want {
		r := frozen[0]
		frozen = frozen[1:]
		if !fresh(r) {
			continue
		}
		ctl.thaw(r)
		s.ready = append(s.ready, r)
		active++
	}
	for n := active + s.freezing; n < want && now.After(ctl.backoff); n++ {
		ctl.drv.startReplica(rev, "scale out")
		active++
	}

	// Replace ready replicas past max_lifetime: one fresh replica each, and
	// the old one drains once the fresh one is ready.
	for _, r := range s.ready {
		if fresh(r) {
			continue
		}
		if r.replacement == "" && now.After(ctl.backoff) {
			r.replacement = ctl.drv.startReplica(rev, "replace "+r.rec.ID+": "+ctl.staleWhy(now, r, ""))
		}
		if nr := ctl.reps[r.replacement]; nr == nil || nr.rec.State == StateFailed {
			r.replacement = ""
		} else if nr.rec.State == StateReady && !nr.busy {
			ctl.drv.drain(r, "replaced by "+nr.rec.ID)
			active--
		}
	}

	// Scale in and idle: ready replicas with nothing to do freeze, the
	// least recently used first, but never below the minimum.
	sort.Slice(s.ready, func(i, j int) bool { return s.ready[i].lastActive.Before(s.ready[j].lastActive) })
	for _, r := range s.ready {
		if r.busy || r.rec.State != StateReady || active <= least {
			continue
		}
		idle := now.Sub(r.lastActive) >= cfg.Scale.IdleTimeout.Duration && (cfg.Scale.Metric == "" || want == 0)
		// The autoscaler may shrink the app to one replica; the last one
		// goes only when idle for idle_timeout.
		if (idle || active > max(want, 1)) && load.Endpoints[r.rec.ID].InFlight == 0 {
			why := "idle for " + cfg.Scale.IdleTimeout.Duration.String()
			if !idle {
				why = "scale in"
			}
			ctl.drv.freeze(r, why)
			active--
		}
	}

	// Frozen replicas stop after freeze_timeout, or at once past
	// max_lifetime.
	for _, r := range s.frozen {
		if r.busy || r.rec.State != StateFrozen {
			continue
		}
		if !fresh(r) {
			ctl.drv.stopReplica(r, ctl.staleWhy(now, r, "frozen "))
		} else if now.Sub(r.frozenAt) >= cfg.Scale.FreezeTimeout.Duration {
			ctl.drv.stopReplica(r, "frozen for "+cfg.Scale.FreezeTimeout.Duration.String())
		}
	}
}

// staleWhy says why replica r, not fresh, goes: its node drains, or it is
// past max_lifetime. ctl.mu is held.
func (ctl *appCtl) staleWhy(now time.Time, r *replica, prefix string) string {
	if ctl.m.draining(r.rec.Node) {
		return "node " + r.rec.Node + " is draining"
	}
	return prefix + "past max_lifetime"
}

// retire takes the replicas of revisions that take no traffic (other than
// surge, the one being rolled out) out of service: ready ones drain and
// freeze, so a rollback thaws them, and stay frozen for rollback_grace;
// starting ones stop. ctl.mu is held.
func (ctl *appCtl) retire(now time.Time, sets map[int]*revSet, weights map[int]int, surge int) {
	grace := ctl.rec.Config.Scale.RollbackGrace.Duration
	for rev, s := range sets {
		if weights[rev] > 0 || rev == surge {
			continue
		}
		for _, r := range s.ready {
			ctl.drv.freeze(r, fmt.Sprintf("revision %d takes no traffic; kept frozen for %s for a rollback", rev, grace))
		}
		for _, r := range s.starting {
			ctl.drv.stopReplica(r, fmt.Sprintf("revision %d takes no traffic", rev))
		}
		for _, r := range s.frozen {
			if !r.busy && r.rec.State == StateFrozen && now.Sub(r.frozenAt) >= grace {
				ctl.drv.stopReplica(r, fmt.Sprintf("revision %d took no traffic for rollback_grace (%s)", rev, grace))
			}
		}
	}
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

func (ctl *appCtl) notify() { poke(ctl.changed) }

// ctx ends when the controller's lead does: the daemon stops, or the node
// no longer leads the cluster.
func (ctl *appCtl) ctx() context.Context { return ctl.lead.ctx }
