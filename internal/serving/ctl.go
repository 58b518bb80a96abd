// Package serving runs apps: it turns an app's shoal.toml into replicas
// (containers on the runtime), keeps each replica on the homeostasis ladder
// (starting, ready, frozen, stopped, draining), wakes apps for the proxy,
// applies the autoscaler's decisions and records what it does in the store.
package serving

import (
	"context"
	"fmt"
	"sort"
	"sync"
	"sync/atomic"
	"time"

	"github.com/shoal-run/shoal/internal/route"
)

// tick is how often an app with running or frozen replicas samples its load
// and walks its replicas down the ladder.
const tick = 100 * time.Millisecond

// appCtl is the controller of one app: it owns the app's replicas on this
// node and converges them to what the app's config, the autoscaler and the
// proxy's wake-ups ask for.
type appCtl struct {
	m    *Manager
	name string
	node Node     // where the app's replicas run
	pub  routePub // orders the app's routes

	wake    chan struct{} // the proxy has a request and no ready replica
	changed chan struct{} // a replica changed state
	dirty   chan struct{} // records to write
	merges  chan struct{} // a replica's state is there to merge
	stop    chan struct{}
	once    sync.Once
	mergeWG sync.WaitGroup // the merger, waited for before the app's files go

	roundAt atomic.Int64 // the clock (UnixNano) of the last reconcile round done, for tests
	woken   atomic.Bool  // a request is waiting for a ready replica

	mu       sync.Mutex
	rec      appRecord
	reps     map[string]*replica
	scaler   *scaler
	unsaved  map[string]bool // replica ids whose record must be written (or deleted)
	appDirty bool            // the app record must be written
	// recMu orders writes of the app record: a writer takes it before
	// ctl.mu and holds it until its write is done.
	recMu      sync.Mutex
	revs       map[int]revisionRecord // revisions read so far
	roFailures int                    // failed replicas of the revision being rolled out
	failures   int                    // replicas that failed since one was last ready
	strikes    int                    // failures since a replica last stayed up for stableAfter
	backoff    time.Time              // no new replica before this
	booting    int                    // replicas starting (startReplica until boot returns)
	bootsDone  chan struct{}          // closed when booting drops to 0; nil when none waits
	lastErr    string
	lastLog    []string
	desired    int
	deleting   bool
	remote     map[string]route.Endpoint // ready replicas of other nodes, from the store
	// floor is the active replica count the app asked for through the
	// self API (replicate raises it, halt and die lower it), set at
	// floorAt; 0 leaves the count to the autoscaler.
	floor   int
	floorAt time.Time

	// What a holder of ctl.mu leaves to do once it is released (unlock):
	// the route to publish, thaws to make, goroutines to start.
	routeDirty bool
	thaws      []*replica
	acts       []func()
}

func newAppCtl(m *Manager, rec appRecord) *appCtl {
	ctl := &appCtl{
		m: m, name: rec.Config.Name, rec: rec, node: m.node,
		wake: make(chan struct{}, 1), changed: make(chan struct{}, 1), dirty: make(chan struct{}, 1),
		merges: make(chan struct{}, 1), stop: make(chan struct{}), reps: map[string]*replica{}, unsaved: map[string]bool{},
		revs: map[int]revisionRecord{}, deleting: rec.Deleting,
	}
	ctl.scaler = newScaler(rec, m.clock)
	return ctl
}

func (ctl *appCtl) poke(ch chan struct{}) {
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
		ctl.clearRemains()
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
	ctl.scaler.observe(now, load, ctl.metricSum(now, ready))
	dec := ctl.decide(active, ready, usage)
	ctl.applyCPU(dec)
	want, reason := dec.Replicas, dec.Reason
	// The autoscaler remembers its window; an app that has had no request
	// for idle_timeout does not grow on that memory (its idle replicas
	// would freeze and thaw in turn).
	// An app scaled on its own metric may work without requests.
	if cfg.Scale.Metric == "" && want > active && load.InFlight == 0 && now.Sub(load.LastRequest) >= cfg.Scale.IdleTimeout.Duration {
		want = active
	}
	if len(ready) > 0 {
		ctl.woken.Store(false)
	} else if (ctl.woken.Load() || load.Queued > 0) && want < 1 {
		want, reason = 1, "a request is waiting for a replica"
	}
	want, reason = ctl.applyFloor(now, load, want, reason)
	want = clamp(want, ctl.rec.Min, ctl.rec.Max)
	if want != ctl.desired {
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
	ctl.clearRemains() // after the starts above

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
	fresh := func(r *replica) bool {
		return cfg.Scale.MaxLifetime.Duration == 0 || now.Sub(r.rec.StartedAt) < cfg.Scale.MaxLifetime.Duration
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
		ctl.startReplica(rev, "scale out")
		active++
	}

	// Replace ready replicas past max_lifetime: one fresh replica each, and
	// the old one drains once the fresh one is ready.
	for _, r := range s.ready {
		if fresh(r) {
			continue
		}
		if r.replacement == "" && now.After(ctl.backoff) {
			r.replacement = ctl.startReplica(rev, "replace "+r.rec.ID)
		}
		if nr := ctl.reps[r.replacement]; nr == nil || nr.rec.State == StateFailed {
			r.replacement = ""
		} else if nr.rec.State == StateReady && !nr.busy {
			ctl.drain(r, "replaced by "+nr.rec.ID)
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
			ctl.freeze(r, why)
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
			ctl.stopReplica(r, "frozen past max_lifetime")
		} else if now.Sub(r.frozenAt) >= cfg.Scale.FreezeTimeout.Duration {
			ctl.stopReplica(r, "frozen for "+cfg.Scale.FreezeTimeout.Duration.String())
		}
	}
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
			ctl.freeze(r, fmt.Sprintf("revision %d takes no traffic; kept frozen for %s for a rollback", rev, grace))
		}
		for _, r := range s.starting {
			ctl.stopReplica(r, fmt.Sprintf("revision %d takes no traffic", rev))
		}
		for _, r := range s.frozen {
			if !r.busy && r.rec.State == StateFrozen && now.Sub(r.frozenAt) >= grace {
				ctl.stopReplica(r, fmt.Sprintf("revision %d took no traffic for rollback_grace (%s)", rev, grace))
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

// publish has the app's route published once ctl.mu is released.
// ctl.mu is held.
func (ctl *appCtl) publish() { ctl.routeDirty = true }

// route is the app's route: its ready replicas. ctl.mu is held.
func (ctl *appCtl) route() route.Route {
	cfg := ctl.rec.Config
	rt := route.Route{App: ctl.name, MaxBodyBytes: cfg.Resources.MaxBodyBytes(), QueueLimit: cfg.Scale.Queue,
		QueueTimeout: cfg.Scale.QueueTimeout.Duration}
	if ctl.deleting {
		rt.Unavailable = "app " + ctl.name + " is being deleted"
	}
	// Only the revisions that take traffic are routed.
	weights := ctl.weights()
	rt.Weights, rt.Sticky = weights, ctl.rec.Sticky
	ids := make([]string, 0, len(ctl.reps))
	for id, r := range ctl.reps {
		if r.rec.State == StateReady && !r.closed && weights[r.rec.Revision] > 0 {
			ids = append(ids, id)
		}
	}
	sort.Strings(ids)
	for _, id := range ids {
		r := ctl.reps[id]
		rt.Endpoints = append(rt.Endpoints, route.Endpoint{ID: id, Addr: r.rec.Addr, Revision: r.rec.Revision})
	}
	for _, ep := range ctl.remote {
		if ctl.reps[ep.ID] == nil && weights[ep.Revision] > 0 {
			rt.Endpoints = append(rt.Endpoints, ep)
		}
	}
	return rt
}

// markDirty queues replica id's record (or its deletion) for the writer.
func (ctl *appCtl) markDirty(id string) {
	ctl.unsaved[id] = true
	ctl.poke(ctl.dirty)
}

func (ctl *appCtl) notify() { ctl.poke(ctl.changed) }

func (ctl *appCtl) ctx() context.Context { return ctl.m.ctx }
