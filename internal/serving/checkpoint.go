package serving

import (
	"context"
	"fmt"
	"time"
)

// The checkpoint tier, between frozen and stopped: a replica frozen for
// freeze_timeout (or stopped to keep frozen memory under the host's
// budget) is dumped to disk with CRIU and ends, its memory freed; the
// app's next start of that revision restores it instead of booting, in
// a new container, with the dumped replica's self API token. An app has
// at most one checkpoint (a newer one replaces it), of one revision, in
// a folder named by app and replica: a start of another revision drops
// it, as do the app's removal, a restore (used once) and checkpointKeep
// without one. A failed dump stops the replica as before; a failed
// restore boots it; each is an event naming the reason.

// checkpointer is a node that checkpoints replicas (localnode's).
type checkpointer interface {
	CheckpointUsable(ctx context.Context) error
	Checkpoint(ctx context.Context, id, dir string) error
	DropCheckpoint(dir string) error
}

// checkpointsDir is the node's folder of checkpoints, under its apps
// folder (localnode's): out of the apps' names, which start with a letter.
const checkpointsDir = ".checkpoints"

// checkpointKeep is how long a checkpoint waits for a start on disk.
const checkpointKeep = 24 * time.Hour

// savedCheckpoint is an app's checkpoint.
type savedCheckpoint struct {
	rev   int
	dir   string // on the node, relative to its apps folder
	token string // the dumped replica's self API token hash
	at    time.Time
	from  string // the dumped replica
}

// checkpointerFor is the node's checkpointer when replica r may be
// checkpointed: its revision's [scale] checkpoint is on and the node
// can. ctl.mu is held.
func (ctl *appCtl) checkpointerFor(rev int) checkpointer {
	ck, ok := ctl.node.(checkpointer)
	if !ok {
		return nil
	}
	if cfg, _, err := ctl.configOf(rev); err != nil || !cfg.Scale.CheckpointOn() {
		return nil
	}
	if ck.CheckpointUsable(context.Background()) != nil {
		return nil
	}
	return ck
}

// checkpointMinBoot is how long a replica's boot (start to ready) must
// have taken for it to be checkpointed when its app leaves [scale]
// checkpoint unset: a restore costs a few hundred milliseconds whatever
// the app (CRIU's own work: 400-700 ms measured on a loaded 2-core
// host), so an app that boots faster starts sooner by booting, or from
// its premade sandbox, and its image would only take disk.
const checkpointMinBoot = time.Second

// slowBoot reports whether replica r is worth a checkpoint by its boot:
// it was itself restored (its app boots slowly), or it booted in
// checkpointMinBoot or more, or its app asks for every replica. ctl.mu is
// held.
func (ctl *appCtl) slowBoot(r *replica) bool {
	if r.rec.Restored {
		return true
	}
	if cfg, _, err := ctl.configOf(r.rec.Revision); err == nil && cfg.Scale.CheckpointAlways() {
		return true
	}
	return r.rec.ReadyAt != nil && r.rec.ReadyAt.Sub(r.rec.StartedAt) >= checkpointMinBoot
}

// checkpointOrStop stops a frozen replica by dumping it to disk when it
// may be (not a stateful app's, and one whose boot was slow: slowBoot),
// else as stopReplica does. ctl.mu is held.
func (ctl *appCtl) checkpointOrStop(r *replica, why string) {
	if r.state != StateFrozen || r.rec.Ordinal != nil || !ctl.slowBoot(r) || ctl.checkpointerFor(r.rec.Revision) == nil {
		ctl.stopReplica(r, why)
		return
	}
	if !ctl.move(r, mvStop, why, nil) {
		return
	}
	ctl.publish()
	ctl.queue(action{kind: actCheckpoint, r: r, why: why, stop: ctl.rec.Config.StopGrace()})
}

// checkpointThenHalt dumps replica r, which takes no traffic, to disk,
// then halts it as any stopped one (the dump ended it; a failed dump
// left it running).
func (ctl *appCtl) checkpointThenHalt(r *replica, stop time.Duration) {
	m, id := ctl.m, r.rec.ID
	ck, _ := ctl.node.(checkpointer)
	dir := checkpointsDir + "/" + ctl.name + "/" + id
	began := m.clock.Now()
	err := ck.Checkpoint(ctl.ctx(), id, dir)
	ctl.mu.Lock()
	if err != nil {
		ctl.unlock()
		m.log.Warn("serving: checkpoint failed; replica stopped", "replica", id, "err", err)
		m.emit("checkpoint", ctl.name, id, fmt.Sprintf("checkpoint failed, stopped instead: %v", err), nil)
		ctl.halt(r, stop)
		return
	}
	old := ctl.ckpt
	ctl.ckpt = &savedCheckpoint{rev: r.rec.Revision, dir: dir, token: r.rec.TokenHash, at: m.clock.Now(), from: id}
	if ctl.deleting { // the app went meanwhile: its checkpoint with it
		old, ctl.ckpt = ctl.ckpt, nil
	}
	ctl.unlock()
	if old != nil {
		ctl.dropCheckpointDir(old.dir)
	}
	took := m.clock.Now().Sub(began)
	m.emit("checkpoint", ctl.name, id, fmt.Sprintf("checkpointed to disk in %s, memory freed; the next start restores it",
		took.Round(time.Millisecond)), map[string]float64{"seconds": took.Seconds()})
	ctl.halt(r, stop)
}

// takeCheckpoint returns the app's checkpoint for a start of revision
// rev, and forgets it (a checkpoint restores once); nil when there is
// none for rev. One of another revision, or older than checkpointKeep,
// is dropped. ctl.mu is held.
func (ctl *appCtl) takeCheckpoint(rev int) *savedCheckpoint {
	c := ctl.ckpt
	if c == nil {
		return nil
	}
	ctl.ckpt = nil
	if c.rev != rev || ctl.m.clock.Now().Sub(c.at) >= checkpointKeep || ctl.checkpointerFor(rev) == nil {
		go ctl.dropCheckpointDir(c.dir)
		return nil
	}
	return c
}

// dropCheckpoint drops the app's checkpoint, if any. ctl.mu is held.
func (ctl *appCtl) dropCheckpoint() {
	if c := ctl.ckpt; c != nil {
		ctl.ckpt = nil
		go ctl.dropCheckpointDir(c.dir)
	}
}

func (ctl *appCtl) dropCheckpointDir(dir string) {
	if ck, ok := ctl.node.(checkpointer); ok {
		if err := ck.DropCheckpoint(dir); err != nil {
			ctl.m.log.Warn("serving: drop checkpoint", "app", ctl.name, "dir", dir, "err", err)
		}
	}
}

// restored makes replica r, restored from checkpoint c, the holder of
// the dumped replica's self API token, which its process has. ctl.mu is
// held.
func (ctl *appCtl) restored(r *replica, c *savedCheckpoint) {
	if c.token == "" || r.rec.TokenHash == c.token {
		return
	}
	ctl.m.self.forget(r.rec.TokenHash)
	r.rec.TokenHash = c.token
	ctl.m.self.add(c.token, ctl.name, r.rec.ID)
	ctl.markDirty(r.rec.ID)
}

// startOrRestore has the node start replica s, restored from checkpoint
// c when there is one: a restore that fails is an event, what it made is
// removed, and the replica boots instead. restored says which it was.
// The checkpoint is dropped either way (it restores once).
func (ctl *appCtl) startOrRestore(s ReplicaSpec, c *savedCheckpoint) (_ Started, restored bool, _ error) {
	if c == nil {
		st, err := ctl.node.Start(ctl.ctx(), s)
		return st, false, err
	}
	defer ctl.dropCheckpointDir(c.dir)
	rs := s
	rs.RestoreFrom = c.dir
	began := ctl.m.clock.Now()
	st, err := ctl.node.Start(ctl.ctx(), rs)
	if err == nil {
		took := ctl.m.clock.Now().Sub(began)
		ctl.m.emit("checkpoint", ctl.name, s.ID, fmt.Sprintf("restored from the checkpoint of %s in %s", c.from,
			took.Round(time.Millisecond)), map[string]float64{"seconds": took.Seconds()})
		return st, true, nil
	}
	ctl.m.log.Warn("serving: restore failed; booting", "replica", s.ID, "err", err)
	ctl.m.emit("checkpoint", ctl.name, s.ID, fmt.Sprintf("restore failed, booting instead: %v", err), nil)
	if rerr := ctl.node.Remove(context.WithoutCancel(ctl.ctx()), s.ID); rerr != nil {
		return Started{}, false, fmt.Errorf("restore failed (%v), and what it made was not removed: %w", err, rerr)
	}
	st, err = ctl.node.Start(ctl.ctx(), s)
	return st, false, err
}
