package serving

import (
	"context"
	"time"
)

// failed takes a replica that crashed or never became ready out of service,
// backs the app off and removes what is left of it.
func (ctl *appCtl) failed(r *replica, err error, kill bool) {
	if ctl.takeOut(r, err) {
		ctl.remove(r, kill)
	}
}

// takeOut marks replica r failed with err: out of the route table, its
// failure counted, its CPU free, and the controller woken to replace it.
// It reports false when r was already on its way out.
func (ctl *appCtl) takeOut(r *replica, err error) bool {
	tail := ctl.replicaTail(r.rec.ID, 20)
	ctl.mu.Lock()
	if r.state.exiting() {
		ctl.unlock()
		return false
	}
	ctl.countFailure(r, err, tail)
	ctl.move(r, mvFail, err.Error(), map[string]float64{"failures": float64(ctl.failures)})
	ctl.publish()
	r.settle()
	ctl.releases.add()
	ctl.unlock()
	// The replacement need not wait for the container's removal and the
	// release of its address, and may take its CPU: its start waits for
	// this release only (boot), which follows the route without r.
	if err := ctl.node.Release(ctl.ctx(), r.rec.ID); err != nil {
		ctl.m.log.Warn("serving: release a failed replica's place", "replica", r.rec.ID, "err", err)
	}
	ctl.releases.finish()
	ctl.notify()
	return true
}

// unhealthy takes a ready replica that failed its health checks out of
// service: the failure counts and backs the app off as a crash does, and
// the replica's replacement may start at once, but the replica drains
// first, so the requests it is serving finish (up to drain_timeout) before
// it is stopped.
func (ctl *appCtl) unhealthy(r *replica, err error) {
	tail := ctl.replicaTail(r.rec.ID, 20)
	ctl.mu.Lock()
	defer ctl.unlock()
	if r.state.exiting() {
		return
	}
	ctl.countFailure(r, err, tail)
	if !ctl.move(r, mvFailChecks, err.Error(), map[string]float64{"failures": float64(ctl.failures)}) {
		return
	}
	// Failing, it drains as any leaving replica does.
	ctl.m.emit("drain", ctl.name, r.rec.ID, "failed its health checks", nil)
	ctl.leave(r)
	ctl.notify()
}

// countFailure records the failure of replica r: its reason, the app's
// failure count and back-off, and a metric; tail is the end of its log.
// The move that takes r out emits the fail event. ctl.mu is held.
func (ctl *appCtl) countFailure(r *replica, err error, tail []string) {
	r.rec.Reason = err.Error()
	ctl.failures++
	if ro := ctl.rec.Rollout; progressing(ro) && r.rec.Revision == ro.Revision {
		ctl.roFailures++
	}
	now := ctl.m.clock.Now()
	if r.rec.ReadyAt != nil && now.Sub(*r.rec.ReadyAt) >= stableAfter {
		ctl.strikes = 0 // it served for a while: not a crash loop
	}
	ctl.strikes++
	// The back-off runs from when the replica became ready: one that
	// served for longer than it is replaced at once, and a crash loop still
	// starts at most one replica per back-off.
	from := now
	if r.rec.ReadyAt != nil && r.rec.ReadyAt.Before(now) {
		from = *r.rec.ReadyAt
	}
	ctl.backoff = from.Add(backoffFor(ctl.strikes))
	ctl.lastErr = err.Error()
	ctl.publish() // the route says when the next start is due
	ctl.lastLog = tail
	ctl.markDirty(r.rec.ID)
	ctl.m.metrics.failures.WithLabelValues(ctl.name).Inc()
}

// stableAfter is how long a replica must have been ready for its failure
// to start the back-off over: a replica that crashes soon after it became
// ready is a crash loop as much as one that never does.
const stableAfter = time.Minute

// backoffFor is how long new starts wait after the n-th failure in a row:
// 100 ms, doubling up to 30 s.
func backoffFor(n int) time.Duration {
	return min(100*time.Millisecond<<min(n-1, 9), 30*time.Second)
}

// remove stops (when kill) and removes the replica's container and
// address, and forgets it. A replica whose container the node is still
// making is left to boot, which removes it once the node's Start has
// returned: a removal meanwhile would find the container being created
// (a conflict) and leave it running.
func (ctl *appCtl) remove(r *replica, kill bool) {
	ctl.mu.Lock()
	booting := r.booting
	ctl.unlock()
	if booting {
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	m, id := ctl.m, r.rec.ID
	if kill {
		ctl.node.Stop(ctx, id, 0)
	}
	if err := ctl.node.Remove(ctx, id); err != nil {
		// Its state stays live: it may still be written to. The removal
		// is tried again in the background; the replica is forgotten.
		m.log.Warn("serving: remove replica; trying again", "replica", id, "err", err)
		ctl.retryRemove(id)
	} else {
		ctl.merge.retire(id) // nothing writes to it any more
	}
	m.self.forget(r.rec.TokenHash)
	ctl.mu.Lock()
	r.settle()
	ctl.markDirty(id)
	// A failed replica stays listed (with its reason) until the next one of
	// the app is ready or fails.
	ctl.move(r, mvRemove, "", nil)
	if r.state == StateDead {
		for _, o := range ctl.reps {
			if o != r {
				ctl.move(o, mvForget, "", nil)
			}
		}
	}
	ctl.unlock()
	ctl.logs.prune(ctl.has)
	ctl.notify()
}

// removeRetry is the wait before a failed removal of a replica's container
// is tried again; it doubles after each failure, up to removeRetryMax.
const (
	removeRetry    = time.Second
	removeRetryMax = time.Minute
)

// retryRemove tries the removal of replica id's container and address
// again, in the background, on the manager's clock, until it succeeds or
// the controllers stop (the daemon stops, or the node leads no more; the
// lead's end waits for it): then the container, which no record names any
// more, is removed by the next daemon at its start, or by its node's sweep
// of strays in a cluster.
func (ctl *appCtl) retryRemove(id string) {
	m, l, lctx := ctl.m, ctl.lead, ctl.ctx()
	l.wg.Add(1) // the lead's end waits for it, as for a start
	go func() {
		defer l.wg.Done()
		wait := removeRetry
		for attempt := 2; ; attempt++ {
			t := m.clock.NewTimer(wait)
			select {
			case <-lctx.Done():
				t.Stop()
				return
			case <-t.C():
			}
			ctx, cancel := context.WithTimeout(lctx, time.Minute)
			err := ctl.node.Remove(ctx, id)
			cancel()
			if err == nil {
				m.log.Info("serving: replica removed", "replica", id, "attempt", attempt)
				ctl.merge.retire(id)
				return
			}
			wait = min(2*wait, removeRetryMax)
			m.log.Warn("serving: remove replica; trying again", "replica", id, "attempt", attempt, "next", wait, "err", err)
		}
	}()
}
