package serving

import (
	"fmt"
	"sort"
	"time"

	"github.com/shoal-run/shoal/internal/route"
)

// revSet is one revision's replicas as a reconcile round sees them.
type revSet struct {
	starting, ready, frozen []*replica
	freezing                int // ready replicas being frozen
}

func (s *revSet) active() int {
	if s == nil {
		return 0
	}
	return len(s.starting) + len(s.ready)
}

// serve converges the replicas of a revision that takes traffic to want
// (never below least). ctl.mu is held.
func (ctl *appCtl) serve(now time.Time, rev int, s *revSet, want, least int, load route.Load) {
	cfg := ctl.rec.Config
	// A replica past max_lifetime, or on a draining node of a cluster,
	// is replaced.
	fresh := func(r *replica) bool {
		return (cfg.Scale.MaxLifetime.Duration == 0 || now.Sub(r.rec.StartedAt) < cfg.Scale.MaxLifetime.Duration) &&
			!ctl.m.draining(r.rec.Node)
	}
	active := s.active()
	// Scale out: thaw frozen replicas (most recently used first), then
	// start new ones.
	frozen := append([]*replica(nil), s.frozen...)
	sort.Slice(frozen, func(i, j int) bool { return frozen[i].lastActive.After(frozen[j].lastActive) })
	for len(frozen) > 0 && active < want {
		r := frozen[0]
		frozen = frozen[1:]
		if !fresh(r) {
			continue
		}
		ctl.thaw(r)
		s.ready = append(s.ready, r)
		active++
	}
	for n := active + s.freezing; n < want && now.After(ctl.backoff); n++ {
		ctl.drv.startReplica(rev, "scale out")
		active++
	}

	// Replace ready replicas past max_lifetime: one fresh replica each, and
	// the old one drains once the fresh one is ready.
	for _, r := range s.ready {
		if fresh(r) {
			continue
		}
		if r.replacement == "" && now.After(ctl.backoff) {
			r.replacement = ctl.drv.startReplica(rev, "replace "+r.rec.ID+": "+ctl.staleWhy(now, r, ""))
		}
		if nr := ctl.reps[r.replacement]; nr == nil || nr.rec.State == StateFailed {
			r.replacement = ""
		} else if nr.state == StateReady {
			ctl.drv.drain(r, "replaced by "+nr.rec.ID)
			active--
		}
	}

	// Scale in and idle: ready replicas with nothing to do freeze, the
	// least recently used first, but never below the minimum.
	sort.Slice(s.ready, func(i, j int) bool { return s.ready[i].lastActive.Before(s.ready[j].lastActive) })
	for _, r := range s.ready {
		if r.state != StateReady || active <= least {
			continue
		}
		idle := now.Sub(r.lastActive) >= cfg.Scale.IdleTimeout.Duration && (cfg.Scale.Metric == "" || want == 0)
		// The autoscaler may shrink the app to one replica; the last one
		// goes only when idle for idle_timeout.
		if (idle || active > max(want, 1)) && load.Endpoints[r.rec.ID].InFlight == 0 {
			why := "idle for " + cfg.Scale.IdleTimeout.Duration.String()
			if !idle {
				why = "scale in"
			}
			ctl.drv.freeze(r, why)
			active--
		}
	}

	// Frozen replicas stop after freeze_timeout, or at once past
	// max_lifetime.
	for _, r := range s.frozen {
		if r.state != StateFrozen {
			continue
		}
		if !fresh(r) {
			ctl.drv.stopReplica(r, ctl.staleWhy(now, r, "frozen "))
		} else if now.Sub(r.frozenAt) >= cfg.Scale.FreezeTimeout.Duration {
			ctl.drv.stopReplica(r, "frozen for "+cfg.Scale.FreezeTimeout.Duration.String())
		}
	}
}

// staleWhy says why replica r, not fresh, goes: its node drains, or it is
// past max_lifetime. ctl.mu is held.
func (ctl *appCtl) staleWhy(now time.Time, r *replica, prefix string) string {
	if ctl.m.draining(r.rec.Node) {
		return "node " + r.rec.Node + " is draining"
	}
	return prefix + "past max_lifetime"
}

// retire takes the replicas of revisions that take no traffic (other than
// surge, the one being rolled out) out of service: ready ones drain and
// freeze, so a rollback thaws them, and stay frozen for rollback_grace;
// starting ones stop. ctl.mu is held.
func (ctl *appCtl) retire(now time.Time, sets map[int]*revSet, weights map[int]int, surge int) {
	grace := ctl.rec.Config.Scale.RollbackGrace.Duration
	for rev, s := range sets {
		if weights[rev] > 0 || rev == surge {
			continue
		}
		for _, r := range s.ready {
			ctl.drv.freeze(r, fmt.Sprintf("revision %d takes no traffic; kept frozen for %s for a rollback", rev, grace))
		}
		for _, r := range s.starting {
			ctl.drv.stopReplica(r, fmt.Sprintf("revision %d takes no traffic", rev))
		}
		for _, r := range s.frozen {
			if r.state == StateFrozen && now.Sub(r.frozenAt) >= grace {
				ctl.drv.stopReplica(r, fmt.Sprintf("revision %d took no traffic for rollback_grace (%s)", rev, grace))
			}
		}
	}
}

func clamp(v, lo, hi int) int {
	if v < lo {
		v = lo
	}
	if hi > 0 && v > hi {
		v = hi
	}
	return v
}
