// Package serving runs apps: it turns an app's shoal.toml into replicas
// (containers on the runtime), keeps each replica on the homeostasis ladder
// (starting, ready, frozen, stopped, draining), wakes apps for the proxy,
// applies the autoscaler's decisions and records what it does in the store.
package serving

import (
	"context"
	"path/filepath"
	"sync"
	"sync/atomic"
	"time"

	"github.com/shoal-run/shoal/internal/route"
)

// tick is how often an app with running or frozen replicas samples its load
// and walks its replicas down the ladder.
const tick = 100 * time.Millisecond

// quietRound is how often an app whose replicas are all ready (or
// frozen) and that has had no request for quietAfter is looked at;
// quietLong, once it has had no request and no new replica for
// quietSettle (decide.go's next).
const (
	quietRound  = time.Second
	quietAfter  = 2 * time.Second
	quietSettle = 30 * time.Second
	quietLong   = 30 * time.Second
)

// appCtl is the controller of one app on this node: it holds the app's
// state (the record, its revisions and replicas, under mu), decides,
// converging the replicas to what the config, the autoscaler and the
// proxy's wake-ups ask for, and carries its decisions out through the
// node, moving each replica along the ladder. Its methods, one file per
// concern:
//
//   - ctl.go: its loop and reconcile round; decide.go, decide_asked.go
//     (pure, no methods) decide; apply.go applies a plan;
//   - appstate.go: the state read and marked under mu; unlock.go: the lock
//     discipline and the actions it defers;
//   - replica_state.go: the ladder's moves; replica.go: a replica's start
//     and exit; ladder.go: its freeze, thaw, drain and stop; health.go:
//     its checks; replica_fail.go: its failures; lost.go: lost nodes;
//   - scaler.go: the autoscaler's inputs; rollout.go: rollouts and
//     revisions; deploy.go: a redeploy; persist.go: the store's writes;
//     adopt.go: adoption after a restart; logs.go, logs_node.go: logs.
type appCtl struct {
	name    string
	cluster bool // a node of a cluster runs it: endpoints name their node
	m       *Manager
	lead    *lead    // the run of the controllers it belongs to
	node    Node     // where the app's replicas run
	pub     routePub // orders the app's routes
	merge   *merger  // merges the state of its replicas that are gone
	logs    replicaLogs

	wake    chan struct{} // the proxy has a request and no ready replica
	traffic chan struct{} // a request came to the app while it was quiet
	changed chan struct{} // a replica changed state
	dirty   chan struct{} // records to write
	stop    chan struct{}
	once    sync.Once

	roundAt atomic.Int64 // the clock (UnixNano) of the last reconcile round done, for tests
	woken   atomic.Bool  // a request is waiting for a ready replica
	wokenAt atomic.Int64 // since when (UnixNano), for the start gate's order

	// recMu orders writes of the app record: a writer takes it before
	// mu and holds it until its write is done.
	recMu sync.Mutex

	mu sync.Mutex
	// Under mu: the app's state.
	rec        appRecord
	gen        uint64 // counts the changes of rec (recChanged)
	reps       map[string]*replica
	revs       map[int]revisionRecord // the app's revisions, read at start or made by a deploy
	unsaved    map[string]bool        // replica ids whose record must be written (or deleted)
	appDirty   bool                   // the app record must be written
	deleting   bool
	scaler     *scaler
	roFailures int       // failed replicas of the revision being rolled out
	failures   int       // replicas that failed since one was last ready
	strikes    int       // failures since a replica last stayed up for stableAfter
	backoff    time.Time // no new replica before this
	lastErr    string
	waiting    string // what keeps a stateful app's ordinal from starting (plan.waiting)
	tcpError   string // why the proxy has no listener for a TCP app's port, as last told
	lastLog    []string
	desired    int
	floor      selfFloor        // what the app asked for through the self API
	ckpt       *savedCheckpoint // a replica dumped to disk, for the next start (checkpoint.go)
	// premade is the app's next replica made ahead (premade.go), nil when
	// none; premadeOK says whether the tier may keep one for the app (this
	// round's), premadeAfter when one may be made again after a failure.
	premade      *premadeBox
	premadeDrops int // premade replicas dropped whose removal is not over; ctl.mu
	premadeOK    bool
	premadeAfter time.Time

	// Under mu: what its holder leaves to do once it is released (unlock).
	routeDirty bool       // the route must be published
	routeSoon  bool       // the route changed in its count of starting replicas only: published without holding up the actions
	remains    []*replica // dead replicas whose container and address wait for clearRemains
	acts       []action   // calls to make, goroutines to start

	// Under mu: routes wait for the store after a decision that took
	// replicas out of service (see hold): holds counts those decisions,
	// stored how many of them the store holds, and held keeps the routes
	// made meanwhile, with their actions, in order, for the writer to
	// publish and do once it has written.
	holds  uint64
	stored uint64
	held   []heldRoute

	// looks are the last readings of the ready replicas' throttling;
	// only the reconcile loop uses them (usage).
	looks map[string]usageLook

	boots    pending // replicas starting
	releases pending // failed replicas whose place is being released
}

func newAppCtl(m *Manager, rec appRecord, l *lead) *appCtl {
	ctl := &appCtl{
		name: rec.Config.Name, cluster: m.disp != nil, rec: rec, reps: map[string]*replica{}, unsaved: map[string]bool{},
		revs: map[int]revisionRecord{}, deleting: rec.Deleting, dirty: make(chan struct{}, 1),
		m: m, lead: l, node: m.node,
		wake: make(chan struct{}, 1), traffic: make(chan struct{}, 1), changed: make(chan struct{}, 1), stop: make(chan struct{}),
	}
	ctl.scaler = newScaler(rec, m.clock)
	ctl.logs = replicaLogs{dir: filepath.Join(m.appDir(ctl.name), "logs"), log: m.log}
	ctl.merge = &merger{app: ctl.name, dir: m.appDir(ctl.name), hooks: m.o.Hooks, images: m.o.Images, clock: m.clock, log: m.log,
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
	return ctl.reps[id] != nil || (ctl.premade != nil && ctl.premade.r.rec.ID == id)
}

func poke(ch chan struct{}) {
	select {
	case ch <- struct{}{}:
	default:
	}
}

func (ctl *appCtl) close() { ctl.once.Do(func() { close(ctl.stop) }) }

// loop runs reconcile whenever something happens, and when the last round
// wants the next. A quiet app (its round's next is longer than a tick)
// sleeps until then in the Manager's set of quiet apps, whose sweep reads
// its load each tick and pokes ctl.traffic when a request came
// (quiet.go): the proxy wakes an app only when no endpoint is free, so a
// burst onto a ready replica would otherwise go unseen by the autoscaler
// until the next round. Traffic after a quiet spell also brings the
// replicas' health checks back to their interval (checkSoon).
func (ctl *appCtl) loop() {
	t := ctl.m.clock.NewTimer(tick)
	defer t.Stop()
	defer ctl.m.setQuiet(ctl, false, time.Time{})
	for {
		select {
		case <-ctl.stop:
			return
		case <-ctl.wake:
		case <-ctl.changed:
		case <-ctl.traffic:
			ctl.checkSoon()
		case <-t.C():
		}
		roundAt := ctl.m.clock.Now()
		next := ctl.reconcile()
		t.Stop()
		ctl.m.setQuiet(ctl, next > tick, roundAt)
		if next > 0 {
			t.Reset(next)
		}
	}
}

// quietEnded reports whether load shows traffic the round at at did not
// see: a request in flight or queued, or one that arrived or ended since.
func quietEnded(load route.Load, at time.Time) bool {
	return load.InFlight > 0 || load.Queued > 0 || load.LastRequest.After(at)
}

// reconcile converges the app's replicas one step: it observes the app's
// load and CPU usage, then, under ctl.mu, decides a plan from a view of
// the app and applies it (decide.go, apply.go). It returns when it wants
// to run next (plan.next).
func (ctl *appCtl) reconcile() time.Duration {
	m := ctl.m
	now := m.clock.Now()
	defer ctl.roundAt.Store(now.UnixNano())
	load := m.o.Router.Load(ctl.name)
	usage := ctl.usage(now, load)
	ctl.mu.Lock()
	defer ctl.unlock()
	if ctl.deleting {
		ctl.clearRemains()
		return 0
	}
	ctl.touch(now, load)
	ctl.tcpTold(load)
	ctl.premadeOK = ctl.premadeAllowed(now, load)
	v := ctl.view()
	p := decide(v, observation{load: load, scale: ctl.autoscale(now, v, load, usage)}, now)
	ctl.apply(now, p)
	return p.next
}

func (ctl *appCtl) notify() { poke(ctl.changed) }

// ctx ends when the controller's lead does: the daemon stops, or the node
// no longer leads the cluster.
func (ctl *appCtl) ctx() context.Context { return ctl.lead.ctx }
