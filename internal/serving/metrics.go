package serving

import (
	"time"

	"github.com/prometheus/client_golang/prometheus"
)

// metrics are serving's Prometheus metrics.
type metrics struct {
	coldStarts *prometheus.HistogramVec
	failures   *prometheus.CounterVec
	cpuChanges *prometheus.CounterVec
	merges     *prometheus.HistogramVec
	decisions  *prometheus.CounterVec
}

// The causes of a scale decision, as shoal_app_scale_decisions_total's
// reason label: the autoscaler's own count (panic: in its panic mode), the
// app kept from growing while idle, a request waiting for a first replica,
// the app's own request through its self API, halted replicas counted
// toward max, min or max, and a replica kept for each revision of a
// traffic split.
const (
	causeAutoscaler = "autoscaler"
	causePanic      = "panic"
	causeIdle       = "idle"
	causeWaiting    = "request_waiting"
	causeSelf       = "self"
	causeHalted     = "halted"
	causeBounds     = "bounds"
	causeSplit      = "split"
)

func newMetrics(m *Manager, reg prometheus.Registerer) *metrics {
	x := &metrics{
		coldStarts: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name:    "shoal_app_activation_seconds",
			Help:    "Time to bring a replica into service, by app and kind (start: a new container until ready; thaw: a frozen one).",
			Buckets: prometheus.ExponentialBuckets(0.0005, 2, 16),
		}, []string{"app", "kind"}),
		failures: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "shoal_app_replica_failures_total", Help: "Replicas that crashed, failed to start or failed their health check.",
		}, []string{"app"}),
		cpuChanges: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "shoal_app_cpu_changes_total", Help: "Live changes of a replica's CPU quota, by direction.",
		}, []string{"app", "direction"}),
		merges: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name:    "shoal_app_state_merge_seconds",
			Help:    "Time to merge a gone replica's state into the app's volume, by app and policy.",
			Buckets: prometheus.ExponentialBuckets(0.0005, 2, 16),
		}, []string{"app", "policy"}),
		decisions: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "shoal_app_scale_decisions_total",
			Help: "Changes of an app's desired replica count, by direction (out, in) and reason (autoscaler, panic, idle, request_waiting, self, halted, bounds).",
		}, []string{"app", "direction", "reason"}),
	}
	if reg == nil {
		return x
	}
	reg.MustRegister(x.coldStarts, x.failures, x.cpuChanges, x.merges, x.decisions, &replicaCollector{m: m,
		desc: prometheus.NewDesc("shoal_app_replicas", "Replicas by app and state.", []string{"app", "state"}, nil)})
	return x
}

func (x *metrics) coldStart(app, kind string, d time.Duration) {
	x.coldStarts.WithLabelValues(app, kind).Observe(d.Seconds())
}

func (x *metrics) decision(app string, out bool, cause string) {
	dir := "in"
	if out {
		dir = "out"
	}
	x.decisions.WithLabelValues(app, dir, cause).Inc()
}

func (x *metrics) merge(app, policy string, d time.Duration) {
	x.merges.WithLabelValues(app, policy).Observe(d.Seconds())
}

// replicaCollector reports the replicas of every app by state when scraped.
type replicaCollector struct {
	m    *Manager
	desc *prometheus.Desc
}

func (c *replicaCollector) Describe(ch chan<- *prometheus.Desc) { ch <- c.desc }

func (c *replicaCollector) Collect(ch chan<- prometheus.Metric) {
	c.m.mu.Lock()
	ctls := make([]*appCtl, 0, len(c.m.apps))
	for _, ctl := range c.m.apps {
		ctls = append(ctls, ctl)
	}
	c.m.mu.Unlock()
	for _, ctl := range ctls {
		counts := map[State]int{}
		for _, s := range []State{StatePending, StateStarting, StateReady, StateFrozen, StateDraining, StateStopped, StateFailed} {
			counts[s] = 0
		}
		ctl.mu.Lock()
		for _, r := range ctl.reps {
			counts[r.rec.State]++
		}
		ctl.unlock()
		for s, n := range counts {
			ch <- prometheus.MustNewConstMetric(c.desc, prometheus.GaugeValue, float64(n), ctl.name, string(s))
		}
	}
}
