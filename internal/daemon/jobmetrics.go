package daemon

import (
	"context"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/shoal-run/shoal/internal/jobs"
	"github.com/shoal-run/shoal/internal/network"
	"github.com/shoal-run/shoal/internal/sandbox"
)

// meteredRunner counts job steps by status and times their phases.
type meteredRunner struct {
	jobs.Runner
	steps  *prometheus.CounterVec
	phases *prometheus.HistogramVec
}

func newMeteredRunner(r jobs.Runner, reg *prometheus.Registry, stats func() (queued, running, slots int)) *meteredRunner {
	m := &meteredRunner{
		Runner: r,
		steps: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "shoal_job_steps_total", Help: "Job steps run, by status.",
		}, []string{"status"}),
		phases: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name:    "shoal_job_step_phase_seconds",
			Help:    "Time of each phase of a job step: create, start, exec, teardown.",
			Buckets: prometheus.ExponentialBuckets(0.0005, 2, 16),
		}, []string{"phase"}),
	}
	reg.MustRegister(m.steps, m.phases)
	for _, g := range []struct {
		name, help string
		pick       func(q, r, s int) int
	}{
		{"shoal_jobs_queued", "Jobs waiting for a slot (on a node of a cluster: the whole cluster's queue).", func(q, _, _ int) int { return q }},
		{"shoal_jobs_running", "Jobs running on this node.", func(_, r, _ int) int { return r }},
		{"shoal_job_slots", "Jobs that may run at once on this node.", func(_, _, s int) int { return s }},
	} {
		pick := g.pick
		reg.MustRegister(prometheus.NewGaugeFunc(prometheus.GaugeOpts{Name: g.name, Help: g.help}, func() float64 {
			return float64(pick(stats()))
		}))
	}
	return m
}

func (m *meteredRunner) Run(ctx context.Context, j *jobs.Job, p *jobs.Plan, ready func()) error {
	err := m.Runner.Run(ctx, j, p, ready)
	for _, s := range j.Steps {
		m.steps.WithLabelValues(s.Status).Inc()
		if s.Status == jobs.StepSkipped {
			continue
		}
		for ph, v := range map[string]float64{"create": s.CreateMs, "start": s.StartMs, "exec": s.ExecMs, "teardown": s.TeardownMs} {
			m.phases.WithLabelValues(ph).Observe((time.Duration(v * float64(time.Millisecond))).Seconds())
		}
	}
	return err
}

// registerNetnsMetrics counts the network namespaces made, given back for
// reuse (job sandboxes recycle theirs), refused for reuse because
// something was left in them, and destroyed.
func registerNetnsMetrics(reg *prometheus.Registry, stats func() network.PoolStats) {
	for _, c := range []struct {
		name, help string
		pick       func(network.PoolStats) uint64
	}{
		{"shoal_netns_created_total", "Network namespaces made.", func(s network.PoolStats) uint64 { return s.Created }},
		{"shoal_netns_reused_total", "Network namespaces found empty after use and put back in the pool.", func(s network.PoolStats) uint64 { return s.Reused }},
		{"shoal_netns_dirty_total", "Network namespaces offered for reuse but destroyed: sockets or interfaces were left.", func(s network.PoolStats) uint64 { return s.Dirty }},
		{"shoal_netns_destroyed_total", "Network namespaces destroyed.", func(s network.PoolStats) uint64 { return s.Destroyed }},
	} {
		pick := c.pick
		reg.MustRegister(prometheus.NewCounterFunc(prometheus.CounterOpts{Name: c.name, Help: c.help}, func() float64 {
			return float64(pick(stats()))
		}))
	}
}

// registerWarmMetrics counts the jobs that found a warm sandbox of their
// shape and those that did not, those that found one used before, and how
// many warm sandboxes are ready.
func registerWarmMetrics(reg *prometheus.Registry, stats func() sandbox.WarmStats) {
	reg.MustRegister(
		prometheus.NewCounterFunc(prometheus.CounterOpts{
			Name: "shoal_job_warm_hits_total", Help: "Jobs whose first step ran in a sandbox created ahead.",
		}, func() float64 { return float64(stats().Hits) }),
		prometheus.NewCounterFunc(prometheus.CounterOpts{
			Name: "shoal_job_warm_misses_total", Help: "Jobs that found no sandbox created ahead for their shape and made their own.",
		}, func() float64 { return float64(stats().Misses) }),
		prometheus.NewCounterFunc(prometheus.CounterOpts{
			Name: "shoal_job_warm_reused_total", Help: "Jobs whose first step ran in a reusable sandbox that an earlier job had run in (emptied since).",
		}, func() float64 { return float64(stats().Reused) }),
		prometheus.NewGaugeFunc(prometheus.GaugeOpts{
			Name: "shoal_job_warm_ready", Help: "Sandboxes created ahead and waiting for a job.",
		}, func() float64 { return float64(stats().Ready) }),
	)
}
