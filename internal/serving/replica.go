package serving

import (
	"github.com/shoal-run/shoal/internal/clock"
	"github.com/shoal-run/shoal/internal/node"

	"crypto/rand"
	"encoding/hex"
	"fmt"
	"os"
	"path/filepath"
	"sync"
	"sync/atomic"
	"time"

	"github.com/shoal-run/shoal/internal/manifest"
)

// replica is one replica of an app on this node.
type replica struct {
	rec replicaRecord
	// state is where it stands on the ladder; only ctl.move changes it
	// (rec.State lists it).
	state State
	// closed keeps a ready replica out of the route table: its last
	// health check failed, or, adopted, it has not passed one yet. It is
	// the one fact beside state: a health check's verdict, which comes
	// and goes while the replica stays ready, and means nothing in any
	// other state (only ready replicas are routed). Becoming ready clears
	// it.
	closed bool
	// checking is held while a health check runs, and by a freeze, so a
	// command check is never frozen half-way.
	checking sync.Mutex
	// armedAt is the clock (UnixNano) when its health loop last waited for
	// the next interval, for tests.
	armedAt atomic.Int64
	// soon brings its health checks back to every interval (checkSoon).
	soon       chan struct{}
	lastActive time.Time
	frozenAt   time.Time
	// replacement is the fresh replica that will take this one's place.
	replacement string
	memory      int64 // bytes in use when frozen
	self        selfState
	// booting is set from its start until the node's Start of its
	// container has returned: meanwhile only boot removes it (see remove).
	booting bool
	// timing is its start's, written by the start's goroutine only.
	timing startTiming
}

func newReplicaID(app string) string {
	b := make([]byte, 4)
	rand.Read(b)
	return app + "-" + hex.EncodeToString(b)
}

// startReplica adds a replica of revision rev, with that revision's config
// and image, as ordinal ord of a stateful app (-1: none), and starts it in
// the background; it returns the new replica's id ("" when the revision
// cannot be read). ctl.mu is held.
func (ctl *appCtl) startReplica(rev int, why string, ord int) string {
	cfg, digest, err := ctl.configOf(rev)
	if err != nil {
		ctl.m.log.Error("serving: no replica started", "app", ctl.name, "revision", rev, "err", err)
		return ""
	}
	now := ctl.m.clock.Now()
	id := newReplicaID(ctl.name)
	var env []string
	if ord >= 0 {
		id = newReplicaID(manifest.ReplicaName(ctl.name, ord))
		env = ctl.ordinalEnv(ord)
	}
	r := &replica{state: stateNew, lastActive: now, booting: true, soon: make(chan struct{}, 1), rec: replicaRecord{
		ID: id, App: ctl.name, Revision: rev, Node: ctl.m.o.Node, StartedAt: now,
		CPU: cfg.Resources.CPU,
	}}
	if ord >= 0 {
		r.rec.Ordinal = &ord
	}
	if ctl.m.disp != nil {
		r.rec.Node = "" // the node is picked at its start
	}
	ctl.m.self.mint(r, ctl.m.o.SelfURL)
	ctl.reps[id] = r
	ctl.timeStart(r, now)
	ctl.move(r, mvStart, why, nil)
	// Close waits for boots: one cut short by the daemon's exit would
	// leave its namespace attached with nobody to release it.
	ctl.lead.wg.Add(1)
	ctl.boots.add()
	// A stateful app's replica is never checkpointed: a restore would
	// bring one ordinal's process back as another's.
	var ck *savedCheckpoint
	checkpointable := ord < 0 && ctl.checkpointerFor(rev) != nil
	if checkpointable {
		ck = ctl.takeCheckpoint(rev)
	}
	ctl.queue(action{kind: actBoot, r: r, boot: &bootSpec{cfg: cfg, digest: digest, env: append(env, r.selfEnv(ctl.m.o.SelfURL)...),
		checkpointable: checkpointable, restore: ck}})
	return id
}

// boot has the node start the replica's container and waits for it to be
// ready.
func (ctl *appCtl) boot(r *replica, b *bootSpec) {
	m, id := ctl.m, r.rec.ID
	cfg, digest, env := b.cfg, b.digest, b.env
	began := m.clock.Now()
	// fail reports a start that went wrong, unless the daemon is stopping:
	// then what was made is only removed.
	fail := func(err error) {
		if ctl.ctx().Err() != nil {
			ctl.remove(r, false)
			return
		}
		ctl.failed(r, err, false)
	}
	if b.premade != nil {
		// Its sandbox is made: the waiting pid 1 execs the entrypoint.
		err := ctl.node.(node.Premaker).Boot(ctl.ctx(), id)
		r.timing.started = m.clock.Now()
		ctl.booted(r, b, began, *b.premade, false, err, fail)
		return
	}
	mounts, err := ctl.mounts(r, cfg, digest)
	if err != nil {
		ctl.bootFailed(r, fmt.Errorf("replica %s: %w", id, err), fail)
		return
	}
	// A failed replica's place may be the one this one takes.
	ctl.releases.wait(m.clock, bootWait, ctl.stop)
	admitted, ok := ctl.admit(r)
	if !ok {
		if b.restore != nil {
			ctl.dropCheckpointDir(b.restore.dir)
		}
		ctl.mu.Lock()
		r.booting = false
		ctl.unlock()
		ctl.remove(r, false) // stopped, or the daemon stops, while it waited: nothing was started
		return
	}
	placed, err := ctl.placeOrdinal(r, cfg)
	if err != nil {
		if m.starts != nil {
			m.starts.release(admitted, false)
		}
		if b.restore != nil {
			ctl.dropCheckpointDir(b.restore.dir)
		}
		ctl.bootFailed(r, fmt.Errorf("replica %s: %w", id, err), fail)
		return
	}
	spec := ReplicaSpec{ID: id, App: ctl.name, Revision: r.rec.Revision, Digest: digest,
		Config: placed, Env: env, Mounts: mounts, Log: ctl.logs.path(id), Checkpointable: b.checkpointable}
	st, restored, err := ctl.startOrRestore(spec, b.restore)
	r.timing.started = m.clock.Now()
	if m.starts != nil {
		m.starts.release(admitted, err == nil)
	}
	ctl.booted(r, b, began, st, restored, err, fail)
}

// bootFailed ends replica r's boot, which failed with err before its
// container was started: a replica stopped meanwhile is only removed,
// others fail.
func (ctl *appCtl) bootFailed(r *replica, err error, fail func(error)) {
	ctl.mu.Lock()
	r.booting = false
	stopping := r.state.exiting()
	ctl.unlock()
	if stopping {
		ctl.remove(r, false) // nothing was started
		return
	}
	fail(err)
}

// booted carries on replica r's boot once the node started (or restored,
// or booted from its premade sandbox) its container, with err: it waits
// for it to be ready.
func (ctl *appCtl) booted(r *replica, b *bootSpec, began time.Time, st Started, restored bool, err error, fail func(error)) {
	m, id, cfg := ctl.m, r.rec.ID, b.cfg
	ctl.mu.Lock()
	if err == nil && restored {
		ctl.restored(r, b.restore)
		r.rec.Restored = true
	}
	r.booting = false
	stopping := r.state.exiting()
	if st.Node != "" {
		r.rec.Node = st.Node
		if err == nil {
			ctl.placedOrdinal(r)
		}
	}
	if err == nil && !stopping {
		r.rec.Addr, r.rec.Pid, r.rec.CPUSet = st.Addr, st.Pid, st.CPUSet
		ctl.markDirty(id)
		ctl.move(r, mvBoot, "", nil)
	}
	ctl.unlock()
	switch {
	case stopping:
		// Removed (its app deleted) while it started: what the node made
		// since is removed now.
		ctl.remove(r, true)
		return
	case err != nil:
		fail(fmt.Errorf("replica %s: %w", id, err))
		return
	}
	exited := make(chan struct{})
	go ctl.watch(r, exited)
	err = ctl.waitReady(r, cfg, exited)
	r.timing.open = m.clock.Now()
	ctl.mu.Lock()
	stopping = r.state.exiting()
	ctl.unlock()
	switch {
	case stopping:
		ctl.remove(r, true) // stopped while it started (app deleted)
		return
	case ctl.ctx().Err() != nil:
		return // the daemon is stopping (or the node leads no more); the next one adopts the replica
	case err == errExitedEarly:
		return // watch reports why
	case err != nil:
		ctl.failed(r, err, true)
		return
	}
	ctl.mu.Lock()
	now := m.clock.Now()
	took := now.Sub(began)
	if !ctl.becomeReady(r, mvReady, fmt.Sprintf("ready %s after start", took.Round(time.Millisecond)), map[string]float64{"seconds": took.Seconds()}) {
		ctl.unlock() // it left while its last check ran: the move that took it out said why
		return
	}
	ctl.unlock() // publishes its route
	ctl.logStartTiming(r, b.premade != nil, m.clock.Now())
	go ctl.healthLoop(r, exited)
	kind := "start"
	if b.premade != nil {
		kind = "premade"
	}
	m.metrics.coldStart(ctl.name, kind, took)
	ctl.notify()
}

// admit waits for the host's start gate to admit r's start (a start
// for a request waiting for the app goes first, the oldest waiting
// first); it returns when the start began, or false when r was stopped
// or the daemon stops meanwhile.
func (ctl *appCtl) admit(r *replica) (time.Time, bool) {
	g := ctl.m.starts
	if g == nil {
		return time.Time{}, true
	}
	at := ctl.m.clock.Now()
	urgent := ctl.woken.Load()
	if urgent {
		at = time.Unix(0, ctl.wokenAt.Load())
	}
	began, ok := g.acquire(ctl.ctx(), ctl.stop, urgent, at)
	if !ok {
		return began, false
	}
	ctl.mu.Lock()
	stopping := r.state.exiting()
	ctl.unlock()
	if stopping {
		g.release(began, false)
		return began, false
	}
	return began, true
}

// becomeReady moves replica r to ready by mv (ready after its start,
// adopted once it answers) with the event's why and inputs: into the
// route, active from now. A replica ready after its start clears the
// app's failures: the failed replicas listed are forgotten (once
// removed). ctl.mu is held.
func (ctl *appCtl) becomeReady(r *replica, mv move, why string, inputs map[string]float64) bool {
	if !ctl.move(r, mv, why, inputs) {
		return false
	}
	now := ctl.m.clock.Now()
	r.lastActive = now
	ctl.publish()
	if mv != mvReady {
		return true
	}
	r.rec.ReadyAt = &now
	ctl.markDirty(r.rec.ID)
	ctl.failures = 0
	ctl.lastErr, ctl.lastLog = "", nil
	for _, o := range ctl.reps {
		if o != r {
			// Removed ones go (the app is healthy again); the others go
			// once removed.
			if !ctl.move(o, mvForget, "", nil) {
				ctl.move(o, mvSupersede, "", nil)
			}
		}
	}
	r.settle()
	return true
}

// mounts makes the replica's state area and returns its mounts and the
// app's volumes' (the node makes a volume at its first start there, from
// the image).
func (ctl *appCtl) mounts(r *replica, cfg manifest.Config, digest string) ([]Mount, error) {
	var mounts []Mount
	for name, dst := range cfg.Volumes {
		if o := r.rec.Ordinal; o != nil {
			name = manifest.OrdinalVolume(name, *o) // the ordinal's own copy
		}
		src := filepath.Join(ctl.m.appDir(ctl.name), "volumes", name)
		if err := os.MkdirAll(filepath.Dir(src), 0o755); err != nil {
			return nil, fmt.Errorf("volume %s: %w", name, err)
		}
		mounts = append(mounts, Mount{Source: src, Destination: dst})
	}
	if cfg.State.Enabled() {
		mt, err := ctl.merge.mount(r.rec.ID, r.rec.Revision, cfg, digest)
		if err != nil {
			return nil, err
		}
		mounts = append(mounts, mt)
	}
	return mounts, nil
}

// watch waits for the replica's container to exit.
func (ctl *appCtl) watch(r *replica, exited chan struct{}) {
	go ctl.logLoop(r.rec.ID, exited)
	st, err := ctl.node.Wait(ctl.ctx(), r.rec.ID)
	close(exited)
	ctl.mu.Lock()
	expected := r.state.exiting()
	ctl.unlock()
	if expected || ctl.ctx().Err() != nil {
		return
	}
	why := fmt.Sprintf("exited with code %d", st.Code)
	switch {
	case err != nil:
		why = fmt.Sprintf("lost: %v", err)
	case st.OOMKilled:
		why = "killed: out of memory"
	case st.Signal != 0:
		why = fmt.Sprintf("killed by signal %d", st.Signal)
	case !st.Known:
		why = "exited"
	}
	err = fmt.Errorf("replica %s %s", r.rec.ID, why)
	ctl.mu.Lock()
	served := r.rec.ReadyAt != nil
	ctl.unlock()
	if !served {
		ctl.failed(r, err, false)
		return
	}
	// A replica that had served is replaced at once; what is left of it
	// (cgroups, overlay mount, bundle, address) is removed once its
	// replacement has started: removing it takes the same kernel locks
	// (cgroups, mounts) that the start needs, and made the replacement
	// about a fifth slower under load. The next reconcile round, which
	// starts the replacement, hands the remains over (clearRemains).
	if ctl.takeOut(r, err) {
		ctl.mu.Lock()
		ctl.remains = append(ctl.remains, r)
		ctl.unlock()
		ctl.notify()
	}
}

// clearRemains removes the remains of dead replicas once the app's starts
// are over (at most bootWait). ctl.mu is held.
func (ctl *appCtl) clearRemains() {
	for _, r := range ctl.remains {
		if ctl.reps[r.rec.ID] != r {
			continue // lost with its node
		}
		ctl.queue(action{kind: actRemove, r: r})
	}
	ctl.remains = nil
}

// bootWait bounds how long the remains of a dead replica wait for the
// app's starting replicas, and a start for the release of a failed
// replica's place.
const bootWait = 5 * time.Second

// pending counts an app's operations under way: its replicas starting
// (from startReplica until boot returns), or the places of its failed
// replicas being released (takeOut).
type pending struct {
	mu   sync.Mutex
	n    int
	done chan struct{} // closed when n drops to 0; nil when none waits
}

func (b *pending) add() {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.n++
}

// finish counts a start as over, and wakes wait when it was the last.
func (b *pending) finish() {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.n--; b.n == 0 && b.done != nil {
		close(b.done)
		b.done = nil
	}
}

// wait waits until none is under way, for at most limit on
// clock c, or until stop is closed.
func (b *pending) wait(c clock.Clock, limit time.Duration, stop <-chan struct{}) {
	b.mu.Lock()
	if b.n == 0 {
		b.mu.Unlock()
		return
	}
	if b.done == nil {
		b.done = make(chan struct{})
	}
	done := b.done
	b.mu.Unlock()
	t := c.NewTimer(limit)
	defer t.Stop()
	select {
	case <-done:
	case <-t.C():
	case <-stop:
	}
}
