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
	tail := tailLog(ctl.logPath(r.rec.ID), 20)
	ctl.mu.Lock()
	if r.stopping {
		ctl.unlock()
		return false
	}
	r.stopping, r.closed = true, true
	r.rec.State = StateFailed
	ctl.countFailure(r, err, tail)
	ctl.publish()
	r.settle()
	ctl.unlock()
	// The replacement need not wait for the container's removal and the
	// release of its address, and may take its CPU.
	ctl.node.Release(r.rec.ID)
	ctl.notify()
	return true
}

// unhealthy takes a ready replica that failed its health checks out of
// service: the failure counts and backs the app off as a crash does, and
// the replica's replacement may start at once, but the replica drains
// first, so the requests it is serving finish (up to drain_timeout) before
// it is stopped.
func (ctl *appCtl) unhealthy(r *replica, err error) {
	tail := tailLog(ctl.logPath(r.rec.ID), 20)
	ctl.mu.Lock()
	defer ctl.unlock()
	if r.stopping {
		return
	}
	r.failed = true
	ctl.countFailure(r, err, tail)
	ctl.drain(r, "failed its health checks")
	ctl.notify()
}

// countFailure records the failure of replica r: its reason, the app's
// failure count and back-off, a metric and a fail event; tail is the end
// of its log. ctl.mu is held.
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
	ctl.lastLog = tail
	ctl.markDirty(r.rec.ID)
	ctl.m.metrics.failures.WithLabelValues(ctl.name).Inc()
	ctl.m.emit("fail", ctl.name, r.rec.ID, err.Error(), map[string]float64{"failures": float64(ctl.failures)})
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
// address, and forgets it.
func (ctl *appCtl) remove(r *replica, kill bool) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	m, id := ctl.m, r.rec.ID
	if kill {
		ctl.node.Stop(ctx, id, 0)
	}
	if err := ctl.node.Remove(ctx, id); err != nil {
		// Its state stays live: it may still be written to. A restarted
		// daemon removes the container and merges the state.
		m.log.Warn("serving: remove replica", "replica", id, "err", err)
	} else {
		ctl.retireState(id) // nothing writes to it any more
	}
	m.forgetToken(r.rec.TokenHash)
	ctl.mu.Lock()
	r.removed = true
	r.settle()
	// A failed replica stays listed (with its reason) until the next one of
	// the app is ready or fails.
	if r.rec.State != StateFailed || r.unlist {
		delete(ctl.reps, id)
	} else {
		for oid, o := range ctl.reps {
			if oid != id && o.rec.State == StateFailed && o.removed {
				delete(ctl.reps, oid)
				ctl.markDirty(oid)
			}
		}
	}
	ctl.markDirty(id)
	ctl.unlock()
	ctl.pruneLogs()
	ctl.notify()
}
