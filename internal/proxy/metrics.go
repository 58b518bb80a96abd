package proxy

import (
	"log/slog"
	"strconv"

	"github.com/prometheus/client_golang/prometheus"
)

// metrics are the proxy's Prometheus series, all labelled by app. Gauges are
// read from the proxy's own counters when scraped, so the hot path pays for
// counters and histograms only.
type metrics struct {
	t          *table
	requests   *prometheus.CounterVec
	duration   *prometheus.HistogramVec
	activation *prometheus.HistogramVec
	added      *prometheus.HistogramVec
	firstByte  *prometheus.HistogramVec
	retries    *prometheus.CounterVec
	cold       *prometheus.CounterVec

	inFlight  *prometheus.Desc
	queued    *prometheus.Desc
	endpoints *prometheus.Desc
}

const ns = "shoal_proxy_"

func newMetrics(t *table, reg prometheus.Registerer, log *slog.Logger) *metrics {
	m := &metrics{
		t: t,
		requests: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: ns + "requests_total",
			Help: "Requests answered, by app and HTTP status (499: the client went away).",
		}, []string{"app", "code"}),
		duration: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name:    ns + "request_duration_seconds",
			Help:    "Time from a request's arrival to the end of its answer, including time held while the app was cold.",
			Buckets: []float64{.0005, .001, .0025, .005, .01, .025, .05, .1, .25, .5, 1, 2.5, 5, 10, 30},
		}, []string{"app"}),
		activation: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name:    ns + "activation_wait_seconds",
			Help:    "Time a request was held while its app had no ready replica.",
			Buckets: []float64{.001, .0025, .005, .01, .025, .05, .1, .25, .5, 1, 2.5, 5, 10, 30, 60},
		}, []string{"app"}),
		added: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name:    ns + "added_latency_seconds",
			Help:    "Time from a request's arrival to its sending to a replica, less the time it was held for activation: the proxy's own share.",
			Buckets: []float64{.00005, .0001, .00025, .0005, .001, .0025, .005, .01, .025, .05, .1, .25, 1},
		}, []string{"app"}),
		firstByte: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name:    ns + "first_byte_seconds",
			Help:    "Time from a request's arrival to the first byte of the replica's answer, by tier: warm (a replica was ready), frozen (held for a thaw), cold (held for a start).",
			Buckets: []float64{.0005, .001, .0025, .005, .01, .025, .05, .1, .25, .5, 1, 2.5, 5, 10, 30, 60},
		}, []string{"app", "tier"}),
		retries: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: ns + "retries_total",
			Help: "Requests sent to another replica: after a failed connect, or after a replica failed before answering an idempotent request without a body.",
		}, []string{"app"}),
		cold: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: ns + "cold_starts_total",
			Help: "Times a request found its app with no ready replica and an empty queue (a wake-up began).",
		}, []string{"app"}),
		inFlight: prometheus.NewDesc(ns+"in_flight",
			"Requests in flight, including those held in the queue.", []string{"app"}, nil),
		queued: prometheus.NewDesc(ns+"queued",
			"Requests held while the app has no ready replica.", []string{"app"}, nil),
		endpoints: prometheus.NewDesc(ns+"endpoints",
			"Ready replicas in the app's route.", []string{"app"}, nil),
	}
	if reg != nil {
		for _, c := range []prometheus.Collector{m.requests, m.duration, m.activation, m.added, m.firstByte, m.retries, m.cold, gauges{m}} {
			if err := reg.Register(c); err != nil {
				log.Warn("proxy: metrics not registered", "err", err)
			}
		}
	}
	return m
}

// tier is how a request found its app: a label of first_byte_seconds.
type tier uint8

const (
	tierWarm tier = iota
	tierFrozen
	tierCold
)

var tierNames = [...]string{tierWarm: "warm", tierFrozen: "frozen", tierCold: "cold"}

func (m *metrics) forApp(name string) appMetrics {
	var fb [len(tierNames)]prometheus.Observer
	for t, n := range tierNames {
		fb[t] = m.firstByte.WithLabelValues(name, n)
	}
	return appMetrics{
		duration:   m.duration.WithLabelValues(name),
		activation: m.activation.WithLabelValues(name),
		added:      m.added.WithLabelValues(name),
		firstByte:  fb,
		retries:    m.retries.WithLabelValues(name),
		cold:       m.cold.WithLabelValues(name),
		requests:   m.requests,
	}
}

// forget drops the series of a removed app.
func (m *metrics) forget(name string) {
	l := prometheus.Labels{"app": name}
	m.requests.DeletePartialMatch(l)
	m.duration.DeletePartialMatch(l)
	m.activation.DeletePartialMatch(l)
	m.added.DeletePartialMatch(l)
	m.firstByte.DeletePartialMatch(l)
	m.retries.DeletePartialMatch(l)
	m.cold.DeletePartialMatch(l)
}

// gauges collects the per-app gauges from the routing table.
type gauges struct{ m *metrics }

func (g gauges) Describe(ch chan<- *prometheus.Desc) {
	ch <- g.m.inFlight
	ch <- g.m.queued
	ch <- g.m.endpoints
}

func (g gauges) Collect(ch chan<- prometheus.Metric) {
	for name, a := range *g.m.t.apps.Load() {
		ch <- prometheus.MustNewConstMetric(g.m.inFlight, prometheus.GaugeValue, float64(a.inFlight.Load()), name)
		ch <- prometheus.MustNewConstMetric(g.m.queued, prometheus.GaugeValue, float64(a.queued.Load()), name)
		n := 0
		if rt := a.route.Load(); rt != nil {
			n = len(rt.endpoints)
		}
		ch <- prometheus.MustNewConstMetric(g.m.endpoints, prometheus.GaugeValue, float64(n), name)
	}
}

func statusText(code int) string { return strconv.Itoa(code) }
