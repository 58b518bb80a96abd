package serving

import (
	"context"
	"fmt"
	"time"

	"github.com/shoal-run/shoal/internal/manifest"
)

// freeze takes a ready replica out of the route table, lets its last
// requests finish and freezes it. ctl.mu is held.
func (ctl *appCtl) freeze(r *replica, why string) {
	if !ctl.move(r, mvFreeze, why, nil) {
		return
	}
	ctl.publish()
	ctl.queue(action{kind: actFreeze, r: r, why: why, grace: ctl.rec.Config.Scale.DrainTimeout.Duration})
}

// freezeNow lets the last requests of replica r, out of the route, finish
// (up to grace) and freezes it; a freeze that fails leaves it ready.
func (ctl *appCtl) freezeNow(r *replica, why string, grace time.Duration) {
	m, id := ctl.m, r.rec.ID
	err := ctl.node.Drain(ctl.ctx(), id, grace)
	var mem int64
	if err == nil {
		r.checking.Lock()
		mem, err = ctl.node.Freeze(ctl.ctx(), id)
		r.checking.Unlock()
	}
	ctl.mu.Lock()
	if err != nil {
		// Still running: back into the route table.
		ctl.move(r, mvUnfrozen, "", nil)
		ctl.publish()
		ctl.unlock()
		m.log.Warn("serving: freeze failed; replica stays ready", "replica", id, "err", err)
		return
	}
	r.frozenAt, r.memory = m.clock.Now(), mem
	at := r.frozenAt
	r.rec.FrozenAt, r.rec.Memory = &at, mem
	ctl.move(r, mvFrozen, why, map[string]float64{"memory_bytes": float64(mem)})
	ctl.publish() // the route counts frozen replicas
	ctl.unlock()
	ctl.notify()
	m.enforceFrozenBudget()
}

// thaw brings a frozen replica back into the route table: the activation
// fast path, a cgroup write, then the route. The write is made once ctl.mu
// is released; until then the replica is thawing, counted as serving.
// ctl.mu is held.
func (ctl *appCtl) thaw(r *replica) {
	if ctl.move(r, mvThaw, "", nil) {
		ctl.queue(action{kind: actThaw, r: r})
	}
}

// drain takes a running replica out of the route table, lets its
// in-flight requests finish (up to drain_timeout), then stops it.
// ctl.mu is held.
func (ctl *appCtl) drain(r *replica, why string) {
	if ctl.move(r, mvDrain, why, nil) {
		ctl.leave(r)
	}
}

// leave takes a replica that moved to draining (or failing) out of
// service: its draining mark is stored before the route without it goes
// out, so a daemon killed in between never routes it again (adopt drains
// it again); then it drains and stops. ctl.mu is held.
func (ctl *appCtl) leave(r *replica) {
	ctl.hold()
	ctl.publish()
	ctl.drainThenHalt(r)
}

// drainThenHalt lets a draining replica's in-flight requests finish, up
// to drain_timeout, then stops it; it starts once ctl.mu is released and
// the route without the replica is out. ctl.mu is held.
func (ctl *appCtl) drainThenHalt(r *replica) {
	ctl.queue(action{kind: actDrainHalt, r: r, grace: ctl.rec.Config.Scale.DrainTimeout.Duration, stop: ctl.rec.Config.StopGrace()})
}

// drainAndHalt lets the in-flight requests of replica r, out of the
// route, finish (up to grace), then stops it (SIGKILL after stop).
func (ctl *appCtl) drainAndHalt(r *replica, grace, stop time.Duration) {
	if err := ctl.node.Drain(ctl.ctx(), r.rec.ID, grace); err != nil {
		ctl.m.log.Warn("serving: drain timed out; stopping with requests in flight", "replica", r.rec.ID)
	}
	ctl.halt(r, stop)
}

// stopReplica stops a replica that takes no traffic. ctl.mu is held.
func (ctl *appCtl) stopReplica(r *replica, why string) {
	if !ctl.move(r, mvStop, why, nil) {
		return
	}
	ctl.publish()
	ctl.queue(action{kind: actHalt, r: r, stop: ctl.rec.Config.StopGrace()})
}

// halt sends the replica's stop signal, then SIGKILL after grace (the
// app's stop_timeout), and removes the replica.
func (ctl *appCtl) halt(r *replica, grace time.Duration) {
	if grace <= 0 {
		grace = manifest.DefaultStopTimeout
	}
	ctx, cancel := context.WithTimeout(context.Background(), grace+10*time.Second)
	defer cancel()
	if err := ctl.node.Stop(ctx, r.rec.ID, grace); err != nil {
		ctl.m.log.Warn("serving: stop replica", "replica", r.rec.ID, "err", err)
	}
	ctl.mu.Lock()
	mv := mvExit
	if r.state == StateFailing && ctl.failures > 0 {
		// Listed with its reason until a replica of the app is ready.
		mv = mvExitFailed
	}
	ctl.move(r, mv, "", nil)
	ctl.unlock()
	ctl.remove(r, false)
}

// enforceFrozenBudget stops frozen replicas, least recently used first,
// while the memory they hold on a node is above that node's budget.
//
// One runs at a time: each counts what the one before it stopped, so that
// freezes at once (many apps going idle together, or a restart) never
// stop more than the budget needs.
func (m *Manager) enforceFrozenBudget() {
	m.budgetMu.Lock()
	defer m.budgetMu.Unlock()
	type cand struct {
		ctl *appCtl
		r   *replica
	}
	m.mu.Lock()
	ctls := make([]*appCtl, 0, len(m.apps))
	for _, c := range m.apps {
		ctls = append(ctls, c)
	}
	m.mu.Unlock()
	all := map[string][]cand{} // by node
	total := map[string]int64{}
	for _, c := range ctls {
		c.mu.Lock()
		for _, r := range c.reps {
			if r.state == StateFrozen {
				all[r.rec.Node] = append(all[r.rec.Node], cand{c, r})
				total[r.rec.Node] += r.memory
			}
		}
		c.unlock()
	}
	for node, cands := range all {
		budget := m.frozenBudget(node)
		for total[node] > budget && len(cands) > 0 {
			oldest := 0
			for i, x := range cands {
				if x.r.lastActive.Before(cands[oldest].r.lastActive) {
					oldest = i
				}
			}
			x := cands[oldest]
			cands = append(cands[:oldest], cands[oldest+1:]...)
			x.ctl.mu.Lock()
			if x.r.state == StateFrozen {
				total[node] -= x.r.memory
				x.ctl.checkpointOrStop(x.r, fmt.Sprintf("frozen replicas hold more than the host's budget of %d bytes", budget))
			}
			x.ctl.unlock()
		}
	}
}

// frozenBudget is how much memory frozen replicas may hold on node: this
// host's --frozen-memory, or in a cluster the budget of the node's record.
func (m *Manager) frozenBudget(node string) int64 {
	if m.disp != nil {
		if b := m.disp.FrozenBudget(node); b > 0 {
			return b
		}
	}
	return m.o.FrozenMemory
}
