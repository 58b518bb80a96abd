package serving

import (
	"context"
	"fmt"
	"time"
)

// thaw brings a frozen replica back into the route table. It is the
// activation fast path: a cgroup write, then the route. ctl.mu is held.
func (ctl *appCtl) thaw(r *replica) bool {
	m := ctl.m
	began := m.clock.Now()
	if err := m.o.Runtime.Thaw(r.rec.ID); err != nil {
		m.log.Warn("serving: thaw failed; stopping the replica", "replica", r.rec.ID, "err", err)
		ctl.stopReplica(r, fmt.Sprintf("thaw failed: %v", err))
		return false
	}
	now := m.clock.Now()
	r.rec.State, r.closed, r.lastActive = StateReady, false, now
	ctl.markDirty(r.rec.ID)
	ctl.publish()
	d := now.Sub(began)
	m.metrics.coldStart(ctl.name, "thaw", d)
	m.emit("thaw", ctl.name, r.rec.ID, "needed to serve", map[string]float64{"seconds": d.Seconds()})
	return true
}

// freeze takes a ready replica out of the route table, lets its last
// requests finish and freezes it. ctl.mu is held.
func (ctl *appCtl) freeze(r *replica, why string) {
	r.busy, r.closed = true, true
	ctl.publish()
	grace := ctl.rec.Config.Scale.DrainTimeout.Duration
	go func() {
		m, id := ctl.m, r.rec.ID
		err := ctl.waitIdle(id, grace)
		if err == nil {
			r.checking.Lock()
			err = m.o.Runtime.Freeze(id)
			r.checking.Unlock()
		}
		var mem int64
		if err == nil {
			if st, serr := m.o.Runtime.Stats(id); serr == nil {
				mem = int64(st.MemoryBytes)
			}
		}
		ctl.mu.Lock()
		r.busy = false
		if err != nil {
			// Still running: back into the route table.
			r.closed = false
			ctl.publish()
			ctl.mu.Unlock()
			m.log.Warn("serving: freeze failed; replica stays ready", "replica", id, "err", err)
			return
		}
		r.rec.State, r.frozenAt, r.memory = StateFrozen, m.clock.Now(), mem
		ctl.markDirty(id)
		ctl.mu.Unlock()
		m.emit("freeze", ctl.name, id, why, map[string]float64{"memory_bytes": float64(mem)})
		ctl.notify()
		m.enforceFrozenBudget()
	}()
}

// drain takes a ready replica out of the route table, lets its in-flight
// requests finish (up to drain_timeout), then stops it. ctl.mu is held.
func (ctl *appCtl) drain(r *replica, why string) {
	r.busy, r.closed, r.stopping = true, true, true
	r.rec.State = StateDraining
	ctl.markDirty(r.rec.ID)
	ctl.publish()
	grace := ctl.rec.Config.Scale.DrainTimeout.Duration
	ctl.m.emit("drain", ctl.name, r.rec.ID, why, nil)
	go func() {
		if err := ctl.waitIdle(r.rec.ID, grace); err != nil {
			ctl.m.log.Warn("serving: drain timed out; stopping with requests in flight", "replica", r.rec.ID)
		}
		ctl.halt(r)
	}()
}

// waitIdle waits until replica id has no request in flight, for at most
// grace on the manager's clock.
func (ctl *appCtl) waitIdle(id string, grace time.Duration) error {
	ctx, cancel := context.WithCancel(ctl.ctx())
	defer cancel()
	if grace <= 0 {
		cancel()
	}
	t := ctl.m.clock.AfterFunc(grace, cancel)
	defer t.Stop()
	return ctl.m.o.Router.WaitIdle(ctx, id)
}

// stopReplica stops a replica that takes no traffic. ctl.mu is held.
func (ctl *appCtl) stopReplica(r *replica, why string) {
	r.busy, r.closed, r.stopping = true, true, true
	r.rec.State = StateStopped
	ctl.markDirty(r.rec.ID)
	ctl.publish()
	ctl.m.emit("stop", ctl.name, r.rec.ID, why, nil)
	go ctl.halt(r)
}

// halt sends SIGTERM, then SIGKILL after stopGrace, and removes the replica.
func (ctl *appCtl) halt(r *replica) {
	ctx, cancel := context.WithTimeout(context.Background(), stopGrace+10*time.Second)
	defer cancel()
	if _, err := ctl.m.o.Runtime.Stop(ctx, r.rec.ID, stopGrace); err != nil && !isNotFound(err) {
		ctl.m.log.Warn("serving: stop replica", "replica", r.rec.ID, "err", err)
	}
	ctl.mu.Lock()
	r.rec.State = StateStopped
	if r.failed && ctl.failures > 0 {
		// Listed with its reason until a replica of the app is ready.
		r.rec.State = StateFailed
	}
	ctl.mu.Unlock()
	ctl.remove(r, false)
}

// stopGrace is how long a replica has between SIGTERM and SIGKILL.
const stopGrace = 10 * time.Second

// enforceFrozenBudget stops frozen replicas, least recently used first,
// while the memory they hold is above the host's budget.
func (m *Manager) enforceFrozenBudget() {
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
	var all []cand
	var total int64
	for _, c := range ctls {
		c.mu.Lock()
		for _, r := range c.reps {
			if r.rec.State == StateFrozen && !r.busy {
				all = append(all, cand{c, r})
				total += r.memory
			}
		}
		c.mu.Unlock()
	}
	if total <= m.o.FrozenMemory {
		return
	}
	for total > m.o.FrozenMemory && len(all) > 0 {
		oldest := 0
		for i, x := range all {
			if x.r.lastActive.Before(all[oldest].r.lastActive) {
				oldest = i
			}
		}
		x := all[oldest]
		all = append(all[:oldest], all[oldest+1:]...)
		x.ctl.mu.Lock()
		if x.r.rec.State == StateFrozen && !x.r.busy {
			total -= x.r.memory
			x.ctl.stopReplica(x.r, fmt.Sprintf("frozen replicas hold more than the host's budget of %d bytes", m.o.FrozenMemory))
		}
		x.ctl.mu.Unlock()
	}
}
