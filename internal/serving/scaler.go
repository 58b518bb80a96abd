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

// cpuUsage is a replica's CPU throttling: its CFS periods, and how many
// of them were throttled.
type cpuUsage struct{ periods, throttled uint64 }

// usage reads the CPU throttling of the app's ready replicas from their
// node, without ctl.mu.
func (ctl *appCtl) usage() map[string]cpuUsage {
	ctl.mu.Lock()
	var ids []string
	for id, r := range ctl.reps {
		if r.state == StateReady {
			ids = append(ids, id)
		}
	}
	ctl.unlock()
	out := make(map[string]cpuUsage, len(ids))
	for _, id := range ids {
		if p, t, err := ctl.node.Usage(ctl.ctx(), id); err == nil {
			out[id] = cpuUsage{p, t}
		}
	}
	return out
}

// ask asks the decider for the active replica count and CPU quotas, from
// the throttling counters of the ready replicas. ctl.mu is held.
func (ctl *appCtl) ask(active int, ready []*replica, usage map[string]cpuUsage) autoscale.Decision {
	cur := autoscale.Current{Replicas: active}
	for _, r := range ready {
		u, ok := usage[r.rec.ID]
		if !ok {
			continue
		}
		cur.CPU = append(cur.CPU, autoscale.ReplicaCPU{ID: r.rec.ID, Quota: r.rec.CPU, Periods: u.periods, Throttled: u.throttled})
	}
	return ctl.scaler.d.Decide(cur)
}

// setCPU changes replica r's CPU quota to q on its node.
func (ctl *appCtl) setCPU(r *replica, q float64, why string) {
	id := r.rec.ID
	if err := ctl.node.SetCPU(ctl.ctx(), id, q); err != nil {
		ctl.m.log.Warn("serving: update CPU quota", "replica", id, "cpus", q, "err", err)
		return
	}
	ctl.mu.Lock()
	defer ctl.unlock()
	dir := "up"
	if q < r.rec.CPU {
		dir = "down"
	}
	ctl.m.metrics.cpuChanges.WithLabelValues(ctl.name, dir).Inc()
	ctl.m.emit("cpu", ctl.name, id, fmt.Sprintf("CPU quota %s from %.2f to %.2f cores: %s", dir, r.rec.CPU, q, why),
		map[string]float64{"from": r.rec.CPU, "to": q})
	r.rec.CPU = q
	ctl.markDirty(id)
}
