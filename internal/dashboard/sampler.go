package dashboard

import (
	"context"
	"sort"
	"strings"
	"sync"
	"time"

	"github.com/shoal-run/shoal/internal/api/types"
	"github.com/shoal-run/shoal/internal/route"
)

// Point is one second of an app as the sampler saw it.
type Point struct {
	Time     time.Time `json:"time"`
	RPS      float64   `json:"rps"`       // requests per second since the previous point
	InFlight int       `json:"in_flight"` // requests in flight, including those queued
	Queued   int       `json:"queued"`    // requests held while the app wakes
	Ready    int       `json:"ready"`     // replicas serving
	Frozen   int       `json:"frozen"`    // replicas frozen
	Other    int       `json:"other"`     // replicas starting, draining, halted or failed
	CPU      float64   `json:"cpu"`       // CPU quota of the replicas that run, in cores
}

// JobPoint is one second of the job queue.
type JobPoint struct {
	Time    time.Time `json:"time"`
	Queued  int       `json:"queued"`
	Running int       `json:"running"`
}

// ring keeps the last n values of a series, oldest first.
type ring[T any] struct {
	buf  []T
	next int
	full bool
}

func newRing[T any](n int) *ring[T] { return &ring[T]{buf: make([]T, n)} }

func (r *ring[T]) add(v T) {
	r.buf[r.next] = v
	r.next = (r.next + 1) % len(r.buf)
	if r.next == 0 {
		r.full = true
	}
}

// slice returns a copy of the values, oldest first.
func (r *ring[T]) slice() []T {
	if !r.full {
		return append([]T(nil), r.buf[:r.next]...)
	}
	out := make([]T, 0, len(r.buf))
	out = append(out, r.buf[r.next:]...)
	return append(out, r.buf[:r.next]...)
}

// appSeries is the history of one app.
type appSeries struct {
	points   *ring[Point]
	requests uint64 // the proxy's counter at the last point
	at       time.Time
}

// Snapshot is what the page shows at one moment: the apps as the serving
// manager lists them with their history, and the job queue.
type Snapshot struct {
	Time    time.Time     `json:"time"`
	Seq     uint64        `json:"seq"` // counts samples; a new one means new data
	Apps    []AppSnapshot `json:"apps"`
	Tenants []Tenant      `json:"tenants"`
	Jobs    JobStats      `json:"jobs"`
	JobHist []JobPoint    `json:"job_history"`
	Cluster bool          `json:"cluster"`         // the daemon is a node of a cluster
	Nodes   []types.Node  `json:"nodes,omitempty"` // the cluster's nodes
	Certs   []types.Cert  `json:"certs,omitempty"` // the certificates the proxy serves
	Err     string        `json:"error,omitempty"` // why the last sample is incomplete
}

// AppSnapshot is an app with its recent history.
type AppSnapshot struct {
	types.App
	Points []Point `json:"points"`
}

// sampler reads the daemon's state every second into bounded histories.
type sampler struct {
	o Options

	mu     sync.Mutex
	seq    uint64
	apps   []types.App
	series map[string]*appSeries
	jobs   *ring[JobPoint]
	stats  JobStats
	tenant []Tenant
	nodes  []types.Node
	certs  []types.Cert
	err    string
	tick   chan struct{} // closed and replaced after each sample
}

func newSampler(o Options) *sampler {
	return &sampler{o: o, series: map[string]*appSeries{}, jobs: newRing[JobPoint](o.History), tick: make(chan struct{})}
}

// run samples every Interval until ctx ends.
func (s *sampler) run(ctx context.Context) {
	for {
		s.sample(ctx)
		t := s.o.Clock.NewTimer(s.o.Interval)
		select {
		case <-ctx.Done():
			t.Stop()
			return
		case <-t.C():
		}
	}
}

// sample takes one point of every app and of the job queue.
func (s *sampler) sample(ctx context.Context) {
	now := s.o.Clock.Now()
	var apps []types.App
	var errText string
	if s.o.Apps != nil {
		var err error
		if apps, err = s.o.Apps.List(ctx); err != nil {
			errText = "apps: " + err.Error()
		}
	}
	loads := make(map[string]route.Load, len(apps))
	if s.o.Loads != nil {
		for _, a := range apps {
			loads[a.Name] = s.o.Loads.Load(a.Name)
		}
	}
	var nodes []types.Node
	if s.o.Nodes != nil {
		var err error
		if nodes, err = s.o.Nodes.List(ctx); err != nil {
			errText = strings.TrimPrefix(errText+"; nodes: "+err.Error(), "; ")
		}
	}
	var certs []types.Cert
	if s.o.Certs != nil {
		var err error
		if certs, err = s.o.Certs.List(ctx); err != nil {
			errText = strings.TrimPrefix(errText+"; certificates: "+err.Error(), "; ")
		}
	}
	var stats JobStats
	var tenants []Tenant
	if s.o.Jobs != nil {
		stats = s.o.Jobs.Stats()
		tenants = s.o.Jobs.Tenants()
		sort.Slice(tenants, func(i, j int) bool { return tenants[i].Name < tenants[j].Name })
	}

	s.mu.Lock()
	defer s.mu.Unlock()
	seen := make(map[string]bool, len(apps))
	for _, a := range apps {
		seen[a.Name] = true
		ser := s.series[a.Name]
		l := loads[a.Name]
		p := pointOf(a, l, now)
		if ser == nil {
			ser = &appSeries{points: newRing[Point](s.o.History)}
			s.series[a.Name] = ser
		} else if dt := now.Sub(ser.at).Seconds(); dt > 0 && l.Requests >= ser.requests {
			// A counter that went back belongs to a new proxy process:
			// that second shows no rate rather than a wrong one.
			p.RPS = float64(l.Requests-ser.requests) / dt
		}
		ser.requests, ser.at = l.Requests, now
		ser.points.add(p)
	}
	for name := range s.series {
		if !seen[name] {
			delete(s.series, name)
		}
	}
	s.apps, s.stats, s.tenant, s.nodes, s.certs, s.err = apps, stats, tenants, nodes, certs, errText
	s.jobs.add(JobPoint{Time: now, Queued: stats.Queued, Running: stats.Running})
	s.seq++
	close(s.tick)
	s.tick = make(chan struct{})
}

// pointOf counts an app's replicas by state and adds up the CPU quota of
// those that run.
func pointOf(a types.App, l route.Load, now time.Time) Point {
	p := Point{Time: now, InFlight: l.InFlight, Queued: l.Queued}
	for _, r := range a.Replicas {
		switch r.State {
		case "ready":
			p.Ready++
		case "frozen":
			p.Frozen++
		default:
			p.Other++
		}
		switch r.State {
		case "ready", "starting", "draining", "halted":
			p.CPU += r.CPU
		}
	}
	return p
}

// snapshot returns the last sample and a channel closed at the next one.
func (s *sampler) snapshot() (Snapshot, <-chan struct{}) {
	s.mu.Lock()
	defer s.mu.Unlock()
	snap := Snapshot{Seq: s.seq, Tenants: s.tenant, Jobs: s.stats, JobHist: s.jobs.slice(), Err: s.err,
		Cluster: s.o.Nodes != nil, Nodes: s.nodes, Certs: s.certs}
	for _, a := range s.apps {
		as := AppSnapshot{App: a}
		if ser := s.series[a.Name]; ser != nil {
			as.Points = ser.points.slice()
		}
		snap.Apps = append(snap.Apps, as)
	}
	if n := len(snap.JobHist); n > 0 {
		snap.Time = snap.JobHist[n-1].Time
	}
	return snap, s.tick
}
