package serving

import (
	"fmt"
	"time"

	"github.com/shoal-run/shoal/internal/autoscale"
	"github.com/shoal-run/shoal/internal/clock"
	"github.com/shoal-run/shoal/internal/route"
)

// scaler feeds an app's load to its autoscale.Decider.
type scaler struct {
	d        *autoscale.Decider
	requests uint64 // the router's request count at the last sample
}

func policy(rec appRecord) autoscale.Policy {
	cfg := rec.Config
	return autoscale.Policy{
		Min: rec.Min, Max: rec.Max, TargetConcurrency: cfg.Scale.TargetConcurrency,
		Metric: cfg.Scale.Metric, Target: cfg.Scale.Target,
		CPU: cfg.Resources.CPU, MaxCPU: cfg.Resources.MaxCPU,
	}.WithDefaults()
}

func newScaler(rec appRecord, c clock.Clock) *scaler {
	d, err := autoscale.New(policy(rec), c)
	if err != nil {
		// The manifest was validated; fall back to the defaults rather
		// than leave the app without a scaler.
		d, _ = autoscale.New(autoscale.Policy{}.WithDefaults(), c)
	}
	return &scaler{d: d}
}

// observe records one sample of the app's load; metric is the app's own
// metric summed over its ready replicas ([scale] metric), 0 without one.
func (s *scaler) observe(at time.Time, l route.Load, metric float64) {
	n := l.Requests - s.requests
	if l.Requests < s.requests {
		n = l.Requests
	}
	s.requests = l.Requests
	s.d.Observe(autoscale.Sample{At: at, Concurrency: float64(l.InFlight), Requests: int(n), Metric: metric})
}

// decide asks the decider for the active replica count and CPU quotas, from
// the throttling counters of the ready replicas. ctl.mu is held.
func (ctl *appCtl) decide(active int, ready []*replica) autoscale.Decision {
	cur := autoscale.Current{Replicas: active}
	for _, r := range ready {
		st, err := ctl.m.o.Runtime.Stats(r.rec.ID)
		if err != nil {
			continue
		}
		cur.CPU = append(cur.CPU, autoscale.ReplicaCPU{ID: r.rec.ID, Quota: r.rec.CPU, Periods: st.NrPeriods, Throttled: st.NrThrottled})
	}
	return ctl.scaler.d.Decide(cur)
}

// applyCPU changes replicas' CPU quotas live, as the decider asked.
// ctl.mu is held.
func (ctl *appCtl) applyCPU(dec autoscale.Decision) {
	for id, q := range dec.CPU {
		r := ctl.reps[id]
		if r == nil || r.rec.State != StateReady {
			continue
		}
		if err := ctl.m.o.Runtime.UpdateCPU(id, q); err != nil {
			ctl.m.log.Warn("serving: update CPU quota", "replica", id, "cpus", q, "err", err)
			continue
		}
		dir := "up"
		if q < r.rec.CPU {
			dir = "down"
		}
		ctl.m.metrics.cpuChanges.WithLabelValues(ctl.name, dir).Inc()
		ctl.m.emit("cpu", ctl.name, id, fmt.Sprintf("CPU quota %s from %.2f to %.2f cores: %s", dir, r.rec.CPU, q, dec.Reason),
			map[string]float64{"from": r.rec.CPU, "to": q})
		r.rec.CPU = q
		ctl.markDirty(id)
	}
}
