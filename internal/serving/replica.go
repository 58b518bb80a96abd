package serving

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"os"
	"path/filepath"
	"sync"
	"time"

	"github.com/shoal-run/shoal/internal/manifest"
	"github.com/shoal-run/shoal/internal/runtime"
)

// replica is one replica of an app on this node.
type replica struct {
	rec      replicaRecord
	busy     bool // an operation is under way (start, freeze, thaw, drain, stop)
	thawing  bool // frozen, thawed once ctl.mu is released
	closed   bool // out of the route table
	stopping bool // an exit is expected
	failed   bool // taken out of service for failing; listed as failed once stopped
	remains  bool // dead; its container and address wait for clearRemains
	removed  bool // its container and address are gone
	unlist   bool // failed, but a replica became ready since: unlisted once removed
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

// Labels on replica containers.
const (
	labelKind     = "shoal.kind"
	labelApp      = "shoal.app"
	labelRevision = "shoal.revision"
	labelDigest   = "shoal.image.digest"
	labelImage    = "shoal.image"
	kindReplica   = "replica"
)

func newReplicaID(app string) string {
	b := make([]byte, 4)
	rand.Read(b)
	return app + "-" + hex.EncodeToString(b)
}

// startReplica adds a replica of revision rev, with that revision's config
// and image, and starts it in the background; it returns the new replica's
// id ("" when the revision cannot be read). ctl.mu is held.
func (ctl *appCtl) startReplica(rev int, why string) string {
	cfg, digest, err := ctl.configOf(rev)
	if err != nil {
		ctl.m.log.Error("serving: no replica started", "app", ctl.name, "revision", rev, "err", err)
		return ""
	}
	now := ctl.m.clock.Now()
	id := newReplicaID(ctl.name)
	r := &replica{busy: true, closed: true, lastActive: now, rec: replicaRecord{
		ID: id, App: ctl.name, Revision: rev, Node: ctl.m.o.Node, State: StatePending, StartedAt: now,
		CPU: cfg.Resources.CPU,
	}}
	ctl.mintToken(r)
	ctl.reps[id] = r
	ctl.markDirty(id)
	ctl.m.emit("start", ctl.name, id, why, nil)
	// Close waits for boots: one cut short by the daemon's exit would
	// leave its namespace attached with nobody to release it.
	ctl.m.wg.Add(1)
	ctl.booting++
	env := ctl.selfEnv(r)
	ctl.spawn(func() {
		defer ctl.m.wg.Done()
		defer ctl.bootDone()
		ctl.boot(r, cfg, digest, env)
	})
	return id
}

// boot has the node start the replica's container and waits for it to be
// ready.
func (ctl *appCtl) boot(r *replica, cfg manifest.Config, digest string, env []string) {
	m, id := ctl.m, r.rec.ID
	began := m.clock.Now()
	// fail reports a start that went wrong, unless the daemon is stopping:
	// then what was made is only removed.
	fail := func(err error) {
		if m.ctx.Err() != nil {
			ctl.remove(r, false)
			return
		}
		ctl.failed(r, err, false)
	}
	mounts, err := ctl.mounts(r, cfg, digest)
	if err != nil {
		fail(fmt.Errorf("replica %s: %w", id, err))
		return
	}
	st, err := ctl.node.Start(ctl.ctx(), ReplicaSpec{ID: id, App: ctl.name, Revision: r.rec.Revision, Digest: digest,
		Config: cfg, Env: env, Mounts: mounts, Log: ctl.logPath(id)})
	ctl.mu.Lock()
	stopping := r.stopping
	if err == nil && !stopping {
		r.rec.Addr, r.rec.Pid, r.rec.CPUSet = st.Addr, st.Pid, st.CPUSet
		r.rec.State = StateStarting
		ctl.markDirty(id)
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
	ctl.mu.Lock()
	stopping = r.stopping
	ctl.unlock()
	switch {
	case stopping:
		ctl.remove(r, true) // stopped while it started (app deleted)
		return
	case m.ctx.Err() != nil:
		return // the daemon is stopping; the next one adopts the replica
	case err == errExitedEarly:
		return // watch reports why
	case err != nil:
		ctl.failed(r, err, true)
		return
	}
	ctl.mu.Lock()
	now := m.clock.Now()
	r.busy, r.closed = false, false
	r.rec.State = StateReady
	r.rec.ReadyAt = &now
	r.lastActive = now
	ctl.failures = 0
	ctl.lastErr, ctl.lastLog = "", nil
	for oid, o := range ctl.reps {
		if o.rec.State != StateFailed || oid == id {
			continue
		}
		if o.removed {
			delete(ctl.reps, oid) // cleaned up; the app is healthy again
			ctl.markDirty(oid)
		} else {
			o.unlist = true // still being removed; unlisted when it is
		}
	}
	ctl.markDirty(id)
	ctl.publish()
	r.settle()
	ctl.unlock()
	go ctl.healthLoop(r, exited)
	d := now.Sub(began)
	m.metrics.coldStart(ctl.name, "start", d)
	m.emit("ready", ctl.name, id, fmt.Sprintf("ready %s after start", d.Round(time.Millisecond)), map[string]float64{"seconds": d.Seconds()})
	ctl.notify()
}

// mounts makes the app's volumes and the replica's state area, and
// returns their mounts.
func (ctl *appCtl) mounts(r *replica, cfg manifest.Config, digest string) ([]runtime.Mount, error) {
	var mounts []runtime.Mount
	for name, dst := range cfg.Volumes {
		src := filepath.Join(ctl.m.appDir(ctl.name), "volumes", name)
		if err := os.MkdirAll(src, 0o755); err != nil {
			return nil, fmt.Errorf("volume %s: %w", name, err)
		}
		mounts = append(mounts, runtime.Mount{Source: src, Destination: dst})
	}
	if cfg.State.Enabled() {
		mt, err := ctl.stateMount(r, cfg, digest)
		if err != nil {
			return nil, err
		}
		mounts = append(mounts, mt)
	}
	return mounts, nil
}

// watch waits for the replica's container to exit.
func (ctl *appCtl) watch(r *replica, exited chan struct{}) {
	st, err := ctl.node.Wait(context.Background(), r.rec.ID)
	close(exited)
	ctl.mu.Lock()
	expected := r.stopping
	ctl.unlock()
	if expected || ctl.m.ctx.Err() != nil {
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
		r.remains = true
		ctl.unlock()
		ctl.notify()
	}
}

// clearRemains removes the remains of dead replicas once the app's starts
// are over (at most bootWait). ctl.mu is held.
func (ctl *appCtl) clearRemains() {
	for _, r := range ctl.reps {
		if r.remains {
			r.remains = false
			ctl.spawn(func() {
				ctl.waitBoots(bootWait)
				ctl.remove(r, false)
			})
		}
	}
}

// bootWait bounds how long the remains of a dead replica wait for the
// app's starting replicas.
const bootWait = 5 * time.Second

// bootDone counts a start as over, and wakes waitBoots when it was the
// last.
func (ctl *appCtl) bootDone() {
	ctl.mu.Lock()
	defer ctl.unlock()
	if ctl.booting--; ctl.booting == 0 && ctl.bootsDone != nil {
		close(ctl.bootsDone)
		ctl.bootsDone = nil
	}
}

// waitBoots waits until no replica of the app is starting, for at most
// limit on the manager's clock, or until the controller stops.
func (ctl *appCtl) waitBoots(limit time.Duration) {
	ctl.mu.Lock()
	if ctl.booting == 0 {
		ctl.unlock()
		return
	}
	if ctl.bootsDone == nil {
		ctl.bootsDone = make(chan struct{})
	}
	done := ctl.bootsDone
	ctl.unlock()
	t := ctl.m.clock.NewTimer(limit)
	defer t.Stop()
	select {
	case <-done:
	case <-t.C():
	case <-ctl.stop:
	}
}
