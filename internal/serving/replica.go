package serving

import (
	"github.com/shoal-run/shoal/internal/clock"

	"crypto/rand"
	"encoding/hex"
	"fmt"
	"os"
	"path/filepath"
	"sync"
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
	checking   sync.Mutex
	lastActive time.Time
	frozenAt   time.Time
	// replacement is the fresh replica that will take this one's place.
	replacement string
	memory      int64 // bytes in use when frozen
	self        selfState
}

func newReplicaID(app string) string {
	b := make([]byte, 4)
	rand.Read(b)
	return app + "-" + hex.EncodeToString(b)
}

// driver carries out what an app's controller decides for its replicas,
// through the app's node: it starts them and watches their health and
// exit, moves them along the ladder, takes failed ones out and removes
// them, and reports back under the app's lock.
type driver struct{ *appCtl }

// startReplica adds a replica of revision rev, with that revision's config
// and image, and starts it in the background; it returns the new replica's
// id ("" when the revision cannot be read). ctl.mu is held.
func (d *driver) startReplica(rev int, why string) string {
	cfg, digest, err := d.configOf(rev)
	if err != nil {
		d.m.log.Error("serving: no replica started", "app", d.name, "revision", rev, "err", err)
		return ""
	}
	now := d.m.clock.Now()
	id := newReplicaID(d.name)
	r := &replica{state: stateNew, lastActive: now, rec: replicaRecord{
		ID: id, App: d.name, Revision: rev, Node: d.m.o.Node, StartedAt: now,
		CPU: cfg.Resources.CPU,
	}}
	if d.m.disp != nil {
		r.rec.Node = "" // the node is picked at its start
	}
	d.m.self.mint(r, d.m.o.SelfURL)
	d.reps[id] = r
	d.move(r, mvStart, why, nil)
	// Close waits for boots: one cut short by the daemon's exit would
	// leave its namespace attached with nobody to release it.
	d.lead.wg.Add(1)
	d.boots.add()
	d.queue(action{kind: actBoot, r: r, boot: &bootSpec{cfg: cfg, digest: digest, env: r.selfEnv(d.m.o.SelfURL)}})
	return id
}

// boot has the node start the replica's container and waits for it to be
// ready.
func (d *driver) boot(r *replica, cfg manifest.Config, digest string, env []string) {
	m, id := d.m, r.rec.ID
	began := m.clock.Now()
	// fail reports a start that went wrong, unless the daemon is stopping:
	// then what was made is only removed.
	fail := func(err error) {
		if d.ctx().Err() != nil {
			d.remove(r, false)
			return
		}
		d.failed(r, err, false)
	}
	mounts, err := d.mounts(r, cfg, digest)
	if err != nil {
		fail(fmt.Errorf("replica %s: %w", id, err))
		return
	}
	st, err := d.node.Start(d.ctx(), ReplicaSpec{ID: id, App: d.name, Revision: r.rec.Revision, Digest: digest,
		Config: cfg, Env: env, Mounts: mounts, Log: d.logs.path(id)})
	d.mu.Lock()
	stopping := r.state.exiting()
	if st.Node != "" {
		r.rec.Node = st.Node
	}
	if err == nil && !stopping {
		r.rec.Addr, r.rec.Pid, r.rec.CPUSet = st.Addr, st.Pid, st.CPUSet
		d.markDirty(id)
		d.move(r, mvBoot, "", nil)
	}
	d.unlock()
	switch {
	case stopping:
		// Removed (its app deleted) while it started: what the node made
		// since is removed now.
		d.remove(r, true)
		return
	case err != nil:
		fail(fmt.Errorf("replica %s: %w", id, err))
		return
	}
	exited := make(chan struct{})
	go d.watch(r, exited)
	err = d.waitReady(r, cfg, exited)
	d.mu.Lock()
	stopping = r.state.exiting()
	d.unlock()
	switch {
	case stopping:
		d.remove(r, true) // stopped while it started (app deleted)
		return
	case d.ctx().Err() != nil:
		return // the daemon is stopping (or the node leads no more); the next one adopts the replica
	case err == errExitedEarly:
		return // watch reports why
	case err != nil:
		d.failed(r, err, true)
		return
	}
	d.mu.Lock()
	now := m.clock.Now()
	took := now.Sub(began)
	if !d.becomeReady(r, mvReady, fmt.Sprintf("ready %s after start", took.Round(time.Millisecond)), map[string]float64{"seconds": took.Seconds()}) {
		d.unlock() // it left while its last check ran: the move that took it out said why
		return
	}
	d.unlock()
	go d.healthLoop(r, exited)
	m.metrics.coldStart(d.name, "start", took)
	d.notify()
}

// becomeReady moves replica r to ready by mv (ready after its start,
// adopted once it answers) with the event's why and inputs: into the
// route, active from now. A replica ready after its start clears the
// app's failures: the failed replicas listed are forgotten (once
// removed). ctl.mu is held.
func (d *driver) becomeReady(r *replica, mv move, why string, inputs map[string]float64) bool {
	if !d.move(r, mv, why, inputs) {
		return false
	}
	now := d.m.clock.Now()
	r.lastActive = now
	d.publish()
	if mv != mvReady {
		return true
	}
	r.rec.ReadyAt = &now
	d.markDirty(r.rec.ID)
	d.failures = 0
	d.lastErr, d.lastLog = "", nil
	for _, o := range d.reps {
		if o != r {
			// Removed ones go (the app is healthy again); the others go
			// once removed.
			if !d.move(o, mvForget, "", nil) {
				d.move(o, mvSupersede, "", nil)
			}
		}
	}
	r.settle()
	return true
}

// mounts makes the replica's state area and returns its mounts and the
// app's volumes' (the node makes a volume at its first start there, from
// the image).
func (d *driver) mounts(r *replica, cfg manifest.Config, digest string) ([]Mount, error) {
	var mounts []Mount
	for name, dst := range cfg.Volumes {
		src := filepath.Join(d.m.appDir(d.name), "volumes", name)
		if err := os.MkdirAll(filepath.Dir(src), 0o755); err != nil {
			return nil, fmt.Errorf("volume %s: %w", name, err)
		}
		mounts = append(mounts, Mount{Source: src, Destination: dst})
	}
	if cfg.State.Enabled() {
		mt, err := d.merge.mount(r.rec.ID, r.rec.Revision, cfg, digest)
		if err != nil {
			return nil, err
		}
		mounts = append(mounts, mt)
	}
	return mounts, nil
}

// watch waits for the replica's container to exit.
func (d *driver) watch(r *replica, exited chan struct{}) {
	go d.logLoop(r.rec.ID, exited)
	st, err := d.node.Wait(d.ctx(), r.rec.ID)
	close(exited)
	d.mu.Lock()
	expected := r.state.exiting()
	d.unlock()
	if expected || d.ctx().Err() != nil {
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
	d.mu.Lock()
	served := r.rec.ReadyAt != nil
	d.unlock()
	if !served {
		d.failed(r, err, false)
		return
	}
	// A replica that had served is replaced at once; what is left of it
	// (cgroups, overlay mount, bundle, address) is removed once its
	// replacement has started: removing it takes the same kernel locks
	// (cgroups, mounts) that the start needs, and made the replacement
	// about a fifth slower under load. The next reconcile round, which
	// starts the replacement, hands the remains over (clearRemains).
	if d.takeOut(r, err) {
		d.mu.Lock()
		d.remains = append(d.remains, r)
		d.unlock()
		d.notify()
	}
}

// clearRemains removes the remains of dead replicas once the app's starts
// are over (at most bootWait). ctl.mu is held.
func (d *driver) clearRemains() {
	for _, r := range d.remains {
		if d.reps[r.rec.ID] != r {
			continue // lost with its node
		}
		d.queue(action{kind: actRemove, r: r})
	}
	d.remains = nil
}

// bootWait bounds how long the remains of a dead replica wait for the
// app's starting replicas.
const bootWait = 5 * time.Second

// boots counts an app's replicas that are starting (from startReplica
// until boot returns).
type boots struct {
	mu   sync.Mutex
	n    int
	done chan struct{} // closed when n drops to 0; nil when none waits
}

func (b *boots) add() {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.n++
}

// finish counts a start as over, and wakes wait when it was the last.
func (b *boots) finish() {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.n--; b.n == 0 && b.done != nil {
		close(b.done)
		b.done = nil
	}
}

// wait waits until no replica of the app is starting, for at most limit on
// clock c, or until stop is closed.
func (b *boots) wait(c clock.Clock, limit time.Duration, stop <-chan struct{}) {
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
