package serving

import (
	"fmt"
	"time"

	"github.com/shoal-run/shoal/internal/route"
)

// raiseFloor keeps at least n replicas serving, as the app asked.
// ctl.mu is held.
func (ctl *appCtl) raiseFloor(now time.Time, n int) {
	ctl.floor, ctl.floorAt = max(ctl.floor, n), now
}

// lowerFloor lets the count go down to n once the app gave a replica up.
// ctl.mu is held.
func (ctl *appCtl) lowerFloor(n int) {
	ctl.floor = max(min(ctl.floor, n), 0)
}

// applyFloor raises the autoscaler's want to what the app asked for; the
// app's request lapses once the app has had no request for idle_timeout
// since it was made. Halted replicas count toward max, so the want is
// capped at max less them. ctl.mu is held.
func (ctl *appCtl) applyFloor(now time.Time, load route.Load, want int, reason string) (int, string) {
	if ctl.floor > 0 {
		idle := ctl.rec.Config.Scale.IdleTimeout.Duration
		if load.InFlight == 0 && now.Sub(ctl.floorAt) >= idle && now.Sub(load.LastRequest) >= idle {
			ctl.floor = 0
		} else if ctl.floor > want {
			want, reason = ctl.floor, fmt.Sprintf("the app asked for %d replica(s) through its self API (autoscaler: %s)", ctl.floor, reason)
		}
	}
	if h := ctl.halted(); h > 0 && want > ctl.rec.Max-h {
		want = max(ctl.rec.Max-h, 0)
		reason = fmt.Sprintf("%s; %d halted replica(s) count toward max %d", reason, h, ctl.rec.Max)
	}
	return want, reason
}

// metricSum is the app's own metric summed over its ready replicas (the
// average per replica times their count): a replica that has not
// published it lately counts 0. ctl.mu is held.
func (ctl *appCtl) metricSum(now time.Time, ready []*replica) float64 {
	name := ctl.rec.Config.Scale.Metric
	if name == "" {
		return 0
	}
	var sum float64
	for _, r := range ready {
		if v, ok := r.self.metrics[name]; ok && now.Sub(v.at) < metricTTL {
			sum += v.value
		}
	}
	return sum
}
