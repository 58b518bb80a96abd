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
	ctl.merge = &merger{app: ctl.name, dir: m.appDir(ctl.name), rt: m.o.Runtime, images: m.o.Images, confiner: m.o.Confiner, clock: m.clock, log: m.log,
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
		switch r.state {
		case StateStarting, StatePending:
			s.starting = append(s.starting, r)
		case StateFreezing:
			s.freezing++ // thawed as soon as its freeze is done
		case StateThawing:
			s.freezing++ // ready once ctl.mu is released
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
		reason = fmt.Sprintf("no request for idle_timeout %s, so not the %d the autoscaler's window still asks", cfg.Scale.IdleTimeout.Duration, want)
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
		if r.state != StateFrozen {
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

func (ctl *appCtl) notify() { poke(ctl.changed) }

// ctx ends when the controller's lead does: the daemon stops, or the node
// no longer leads the cluster.
func (ctl *appCtl) ctx() context.Context { return ctl.lead.ctx }
