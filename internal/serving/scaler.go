package serving

import (
	"fmt"
	"time"

	"github.com/shoal-run/shoal/internal/autoscale"
	"github.com/shoal-run/shoal/internal/clock"
	"github.com/shoal-run/shoal/internal/node"
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

// cpuUsage is a replica's CPU counters, read at a time, and its requests
// in flight.
type cpuUsage struct {
	node.CPUUse
	at       time.Time // when the counters were read
	inFlight int       // requests in flight now, from the proxy's load
}

// usageIdle is the longest a ready replica's throttling goes unread: the
// period a replica without requests and without CPU work backs off to,
// doubling from a tick, so that idle replicas cost the daemon next to
// nothing however many there are.
const usageIdle = 5 * time.Second

// usageSettle is how long a replica stays read every round after its
// last request or CPU work, before its period starts to back off.
const usageSettle = time.Second

// usageLook is the last reading of a replica's throttling, and how long
// until the next.
type usageLook struct {
	u     cpuUsage
	at    time.Time
	every time.Duration
	moved time.Time // the last reading that saw a request or CPU work
}

// usage reads the CPU counters of the app's ready replicas from their
// node, without ctl.mu: a replica that had a request since its last
// reading, or whose CFS periods moved, every round; one that did
// neither for usageSettle at a period that doubles up to usageIdle, the
// decider getting
// its last reading meanwhile (the counters are cumulative: a stale
// reading only delays a verdict on a replica that was idle). Only the
// reconcile loop calls it (ctl.looks is its own).
func (ctl *appCtl) usage(now time.Time, load route.Load) map[string]cpuUsage {
	ctl.mu.Lock()
	var ids []string
	for id, r := range ctl.reps {
		if r.state == StateReady {
			ids = append(ids, id)
		}
	}
	ctl.unlock()
	if ctl.looks == nil {
		ctl.looks = map[string]usageLook{}
	}
	out := make(map[string]cpuUsage, len(ids))
	seen := make(map[string]bool, len(ids))
	for _, id := range ids {
		seen[id] = true
		l, ok := ctl.looks[id]
		el := load.Endpoints[id]
		busy := el.InFlight > 0 || (!el.LastRequest.IsZero() && !el.LastRequest.Before(l.at))
		if ok && !busy && now.Sub(l.at) < l.every {
			u := l.u
			u.inFlight = el.InFlight
			out[id] = u
			continue
		}
		cu, err := ctl.node.Usage(ctl.ctx(), id)
		if err != nil {
			delete(ctl.looks, id)
			continue
		}
		// Stamped when the read returned, not with the round's now: the
		// decider judges the CPU time used over the span between two
		// readings, which a slow read would otherwise shorten.
		u := cpuUsage{CPUUse: cu, at: ctl.m.clock.Now(), inFlight: el.InFlight}
		look := usageLook{u: u, at: now, every: tick, moved: l.moved}
		if !ok || busy || u.Periods != l.u.Periods {
			look.moved = now
		} else if now.Sub(l.moved) >= usageSettle {
			look.every = min(max(l.every*2, tick), usageIdle)
		}
		ctl.looks[id] = look
		out[id] = u
	}
	for id := range ctl.looks {
		if !seen[id] {
			delete(ctl.looks, id)
		}
	}
	return out
}

// ask asks the decider for the active replica count and CPU quotas, from
// the CPU counters and requests in flight of the ready replicas. ctl.mu
// is held.
func (ctl *appCtl) ask(active int, ready []*replica, usage map[string]cpuUsage) autoscale.Decision {
	cur := autoscale.Current{Replicas: active}
	for _, r := range ready {
		u, ok := usage[r.rec.ID]
		if !ok {
			continue
		}
		cur.CPU = append(cur.CPU, autoscale.ReplicaCPU{ID: r.rec.ID, Quota: r.rec.CPU, Periods: u.Periods, Throttled: u.Throttled,
			Used: u.Used, Stalled: u.Stalled, Pressure: u.Pressure, At: u.at, InFlight: u.inFlight})
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
