package serving

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"sync"
	"time"

	"github.com/shoal-run/shoal/internal/manifest"
	"github.com/shoal-run/shoal/internal/network"
	"github.com/shoal-run/shoal/internal/placement"
	"github.com/shoal-run/shoal/internal/runtime"
)

// replica is one replica of an app on this node.
type replica struct {
	rec      replicaRecord
	att      *network.Attachment
	busy     bool // an operation is under way (start, freeze, drain, stop)
	closed   bool // out of the route table
	stopping bool // an exit is expected
	failed   bool // taken out of service for failing; listed as failed once stopped
	remains  bool // dead; its container and address wait for clearRemains
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
	r.rec.CPUSet = ctl.m.o.Placer.Place(placement.Request{ID: id, App: ctl.name, MaxCPU: cfg.Resources.MaxCPU})
	ctl.mintToken(r)
	ctl.reps[id] = r
	ctl.markDirty(id)
	ctl.m.emit("start", ctl.name, id, why, nil)
	// Close waits for boots: one cut short by the daemon's exit would
	// leave its namespace attached with nobody to release it.
	ctl.m.wg.Add(1)
	ctl.booting++
	go func() {
		defer ctl.m.wg.Done()
		defer ctl.bootDone()
		ctl.boot(r, cfg, digest)
	}()
	return id
}

// boot creates and starts the replica's container and waits for it to be
// ready.
func (ctl *appCtl) boot(r *replica, cfg manifest.Config, digest string) {
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
	spec, err := ctl.spec(r, cfg, digest)
	if err != nil {
		fail(fmt.Errorf("replica %s: %w", id, err))
		return
	}
	att, err := m.o.Network.Acquire(ctl.ctx(), id, bridge)
	if err != nil {
		fail(fmt.Errorf("replica %s: network: %w", id, err))
		return
	}
	ctl.mu.Lock()
	if r.stopping {
		// Removed (its app deleted) while the namespace was made: remove
		// has run already and found no attachment to release.
		ctl.mu.Unlock()
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		if err := m.o.Network.Release(ctx, att); err != nil {
			m.log.Warn("serving: release replica network", "replica", id, "err", err)
		}
		return
	}
	r.att = att
	r.rec.Addr = net.JoinHostPort(att.IP.String(), strconv.Itoa(cfg.Port))
	ctl.mu.Unlock()
	spec.NetNSPath = att.NSPath
	logf, err := os.OpenFile(ctl.logPath(id), os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o600)
	if err != nil {
		fail(fmt.Errorf("replica %s: log: %w", id, err))
		return
	}
	spec.Stdout, spec.Stderr = logf, logf
	c, err := m.o.Runtime.Run(ctl.ctx(), spec)
	logf.Close()
	if err != nil {
		fail(fmt.Errorf("replica %s: start: %w", id, err))
		return
	}
	ctl.mu.Lock()
	r.rec.Pid = c.Pid
	r.rec.State = StateStarting
	ctl.markDirty(id)
	ctl.mu.Unlock()
	exited := make(chan struct{})
	go ctl.watch(r, exited)
	err = ctl.waitReady(r, cfg, exited)
	ctl.mu.Lock()
	stopping := r.stopping
	ctl.mu.Unlock()
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
		if o.att == nil {
			delete(ctl.reps, oid) // cleaned up; the app is healthy again
			ctl.markDirty(oid)
		} else {
			o.unlist = true // still being removed; unlisted when it is
		}
	}
	ctl.markDirty(id)
	ctl.publish()
	r.settle()
	ctl.mu.Unlock()
	go ctl.healthLoop(r, exited)
	d := now.Sub(began)
	m.metrics.coldStart(ctl.name, "start", d)
	m.emit("ready", ctl.name, id, fmt.Sprintf("ready %s after start", d.Round(time.Millisecond)), map[string]float64{"seconds": d.Seconds()})
	ctl.notify()
}

// spec builds the container of replica r.
func (ctl *appCtl) spec(r *replica, cfg manifest.Config, digest string) (runtime.Spec, error) {
	img, err := ctl.m.o.Images.Get(ctl.ctx(), digest)
	if err != nil {
		return runtime.Spec{}, fmt.Errorf("image %s (%s): %w", cfg.Image, digest, err)
	}
	args := append(append([]string{}, img.Config.Entrypoint...), img.Config.Cmd...)
	if len(cfg.Command) > 0 {
		args = append(append([]string{}, img.Config.Entrypoint...), cfg.Command...)
	}
	if len(args) == 0 {
		return runtime.Spec{}, fmt.Errorf("image %s has no entrypoint or command; set command in the manifest", cfg.Image)
	}
	env := append([]string{}, img.Config.Env...)
	for k, v := range cfg.Env {
		env = append(env, k+"="+v)
	}
	env = append(env, "PORT="+strconv.Itoa(cfg.Port), "SHOAL_APP="+cfg.Name, "SHOAL_REPLICA="+r.rec.ID,
		"SHOAL_REVISION="+strconv.Itoa(r.rec.Revision))
	env = append(env, ctl.selfEnv(r)...)
	var mounts []runtime.Mount
	for name, dst := range cfg.Volumes {
		src := filepath.Join(ctl.m.appDir(ctl.name), "volumes", name)
		if err := os.MkdirAll(src, 0o755); err != nil {
			return runtime.Spec{}, fmt.Errorf("volume %s: %w", name, err)
		}
		mounts = append(mounts, runtime.Mount{Source: src, Destination: dst})
	}
	if cfg.State.Enabled() {
		mt, err := ctl.stateMount(r, cfg, digest)
		if err != nil {
			return runtime.Spec{}, err
		}
		mounts = append(mounts, mt)
	}
	cwd := img.Config.WorkingDir
	if cwd == "" {
		cwd = "/"
	}
	return runtime.Spec{
		ID: r.rec.ID, Layers: img.Layers, Args: args, Env: env, Cwd: cwd, User: img.Config.User,
		Hostname: r.rec.ID, Mounts: mounts,
		Limits: runtime.Limits{CPUs: cfg.Resources.CPU, CPUSet: r.rec.CPUSet, MemoryBytes: cfg.Resources.MemoryBytes(), Pids: cfg.Resources.Pids},
		Labels: map[string]string{labelKind: kindReplica, labelApp: cfg.Name, labelRevision: strconv.Itoa(r.rec.Revision),
			labelDigest: digest, labelImage: cfg.Image},
	}, nil
}

// watch waits for the replica's container to exit.
func (ctl *appCtl) watch(r *replica, exited chan struct{}) {
	st, err := ctl.m.o.Runtime.Wait(context.Background(), r.rec.ID)
	close(exited)
	ctl.mu.Lock()
	expected := r.stopping
	ctl.mu.Unlock()
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
	ctl.mu.Unlock()
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
		ctl.mu.Unlock()
		ctl.notify()
	}
}

// clearRemains removes the remains of dead replicas once the app's starts
// are over (at most bootWait). ctl.mu is held.
func (ctl *appCtl) clearRemains() {
	for _, r := range ctl.reps {
		if r.remains {
			r.remains = false
			go func() {
				ctl.waitBoots(bootWait)
				ctl.remove(r, false)
			}()
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
	defer ctl.mu.Unlock()
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
		ctl.mu.Unlock()
		return
	}
	if ctl.bootsDone == nil {
		ctl.bootsDone = make(chan struct{})
	}
	done := ctl.bootsDone
	ctl.mu.Unlock()
	t := ctl.m.clock.NewTimer(limit)
	defer t.Stop()
	select {
	case <-done:
	case <-t.C():
	case <-ctl.stop:
	}
}
