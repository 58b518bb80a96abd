package proxy

import (
	"maps"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/shoal-run/shoal/internal/route"
)

// pruneAfter is how long a closed, idle endpoint keeps its counters before
// the proxy forgets it.
const pruneAfter = 10 * time.Minute

// app is the state of one app that lives across route changes: its current
// route, its counters, and the channel that wakes requests waiting for an
// endpoint.
type app struct {
	name  string
	route atomic.Pointer[routeSnap] // nil once the app is removed

	inFlight atomic.Int64 // includes queued
	queued   atomic.Int64
	requests atomic.Uint64
	last     atomic.Int64 // unix nanoseconds

	// changed is closed and replaced on every change of the route, so that
	// waiting requests wake the moment an endpoint appears.
	changed atomic.Pointer[chan struct{}]

	eps map[string]*endpoint // endpoints the app has had; guarded by Proxy.mu

	m appMetrics
}

// routeSnap is an immutable view of one app's route.
type routeSnap struct {
	endpoints []*endpoint
	split     // how a request chooses among them
	// byID finds the endpoint a sticky cookie names; nil unless sticky.
	byID map[string]*endpoint

	maxBody      int64
	queueLimit   int64
	queueTimeout time.Duration
	unavailable  string
}

func (a *app) waitChan() <-chan struct{} { return *a.changed.Load() }

// notify wakes every request waiting on the app.
func (a *app) notify() {
	ch := make(chan struct{})
	old := a.changed.Swap(&ch)
	close(*old)
}

// Update replaces the whole table: apps not in routes are removed.
func (p *Proxy) Update(routes []route.Route) {
	p.mu.Lock()
	defer p.mu.Unlock()
	old := *p.table.Load()
	next := make(map[string]*app, len(routes))
	var closing []*endpoint
	var wake []*app
	keep := map[string]bool{}
	for _, r := range routes {
		for _, e := range r.Endpoints {
			keep[e.ID] = true
		}
	}
	for _, r := range routes {
		name := strings.ToLower(r.App)
		a := old[name]
		if a == nil {
			a = p.newApp(name)
		}
		closing = append(closing, p.setLocked(a, r, keep)...)
		next[name] = a
		wake = append(wake, a)
	}
	var gone []*app
	for name, a := range old {
		if next[name] == nil {
			closing = append(closing, p.removeLocked(a)...)
			gone = append(gone, a)
		}
	}
	p.table.Store(&next)
	p.closeAndWake(closing, append(wake, gone...))
	for _, a := range gone {
		p.metrics.forget(a.name)
	}
	p.pruneLocked()
}

// SetRoute adds or changes the route of one app.
func (p *Proxy) SetRoute(r route.Route) {
	p.mu.Lock()
	defer p.mu.Unlock()
	name := strings.ToLower(r.App)
	old := *p.table.Load()
	a := old[name]
	added := a == nil
	if added {
		a = p.newApp(name)
	}
	keep := make(map[string]bool, len(r.Endpoints))
	for _, e := range r.Endpoints {
		keep[e.ID] = true
	}
	closing := p.setLocked(a, r, keep)
	if added {
		next := maps.Clone(old)
		next[name] = a
		p.table.Store(&next)
	}
	p.closeAndWake(closing, []*app{a})
	p.pruneLocked()
}

// RemoveRoute removes an app: its host answers 404 and its endpoints are
// closed. Requests in flight finish.
func (p *Proxy) RemoveRoute(name string) {
	p.mu.Lock()
	defer p.mu.Unlock()
	name = strings.ToLower(name)
	old := *p.table.Load()
	a := old[name]
	if a == nil {
		return
	}
	next := maps.Clone(old)
	delete(next, name)
	closing := p.removeLocked(a)
	p.table.Store(&next)
	p.closeAndWake(closing, []*app{a})
	p.metrics.forget(name)
	p.pruneLocked()
}

func (p *Proxy) newApp(name string) *app {
	a := &app{name: name, eps: map[string]*endpoint{}}
	ch := make(chan struct{})
	a.changed.Store(&ch)
	a.m = p.metrics.forApp(name)
	return a
}

// setLocked publishes r as a's route and returns the endpoints that left it.
// Endpoints in r are opened before the route is published; those that left
// are closed by the caller after it, so a request never spins on a closed
// endpoint of a route that is still current. keep holds every endpoint ID
// that stays routed anywhere.
func (p *Proxy) setLocked(a *app, r route.Route, keep map[string]bool) []*endpoint {
	snap := &routeSnap{
		endpoints:    make([]*endpoint, 0, len(r.Endpoints)),
		maxBody:      r.MaxBodyBytes,
		queueLimit:   int64(r.QueueLimit),
		queueTimeout: r.QueueTimeout,
		unavailable:  r.Unavailable,
	}
	if snap.maxBody == 0 {
		snap.maxBody = route.DefaultMaxBodyBytes
	}
	if snap.queueLimit <= 0 {
		snap.queueLimit = route.DefaultQueueLimit
	}
	if snap.queueTimeout <= 0 {
		snap.queueTimeout = route.DefaultQueueTimeout
	}
	var closing []*endpoint
	revs := make([]int, 0, len(r.Endpoints)) // of snap.endpoints
	seen := make(map[string]bool, len(r.Endpoints))
	for _, re := range r.Endpoints {
		if re.ID == "" || re.Addr == "" || seen[re.ID] {
			continue
		}
		seen[re.ID] = true
		e := p.endpoints[re.ID]
		if e != nil && e.addr != re.Addr {
			// Same replica ID at a new address: a new endpoint; the old one
			// drains.
			closing = append(closing, e)
			e = nil
		}
		if e == nil {
			e = newEndpoint(re.ID, re.Addr)
			p.endpoints[re.ID] = e
		}
		e.open()
		a.eps[re.ID] = e
		snap.endpoints = append(snap.endpoints, e)
		revs = append(revs, re.Revision)
	}
	snap.split = newSplit(snap.endpoints, revs, r.Weights)
	if r.Sticky {
		snap.byID = make(map[string]*endpoint, len(snap.endpoints))
		for _, e := range snap.endpoints {
			snap.byID[e.id] = e
		}
	}
	if old := a.route.Load(); old != nil {
		for _, e := range old.endpoints {
			if !keep[e.id] || p.endpoints[e.id] != e {
				closing = append(closing, e)
			}
		}
	}
	a.route.Store(snap)
	return closing
}

// removeLocked marks a removed and returns its endpoints to close.
func (p *Proxy) removeLocked(a *app) []*endpoint {
	old := a.route.Swap(nil)
	if old == nil {
		return nil
	}
	return old.endpoints
}

func (p *Proxy) closeAndWake(closing []*endpoint, apps []*app) {
	now := p.clock.Now()
	for _, e := range closing {
		e.close(now)
	}
	for _, a := range apps {
		a.notify()
	}
}

// pruneLocked forgets endpoints that have been closed and idle for a while.
func (p *Proxy) pruneLocked() {
	now := p.clock.Now()
	for id, e := range p.endpoints {
		if e.prunable(now) {
			delete(p.endpoints, id)
		}
	}
	for _, a := range *p.table.Load() {
		for id, e := range a.eps {
			if e.prunable(now) || p.endpoints[id] != e {
				delete(a.eps, id)
			}
		}
	}
}

// Load returns the counters of an app; the zero Load for an unknown app.
func (p *Proxy) Load(name string) route.Load {
	a := (*p.table.Load())[strings.ToLower(name)]
	if a == nil {
		return route.Load{}
	}
	s := route.Load{
		InFlight:    int(a.inFlight.Load()),
		Queued:      int(a.queued.Load()),
		Requests:    a.requests.Load(),
		LastRequest: unixTime(a.last.Load()),
		Endpoints:   map[string]route.EndpointLoad{},
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	for id, e := range a.eps {
		if e.closed.Load() && e.inFlight.Load() <= 0 {
			continue
		}
		s.Endpoints[id] = e.stats()
	}
	return s
}

// Loads returns the counters of every app in the table, in one call.
func (p *Proxy) Loads() map[string]route.Load {
	t := *p.table.Load()
	out := make(map[string]route.Load, len(t))
	for name := range t {
		out[name] = p.Load(name)
	}
	return out
}

func unixTime(ns int64) time.Time {
	if ns == 0 {
		return time.Time{}
	}
	return time.Unix(0, ns)
}

// appMetrics are the per-app series, resolved once per app.
type appMetrics struct {
	duration   prometheus.Observer
	activation prometheus.Observer
	retries    prometheus.Counter
	cold       prometheus.Counter
	codes      sync.Map // int → prometheus.Counter
	requests   *prometheus.CounterVec
}

func (a *app) observe(code int, d time.Duration) {
	c, ok := a.m.codes.Load(code)
	if !ok {
		c, _ = a.m.codes.LoadOrStore(code, a.m.requests.WithLabelValues(a.name, statusText(code)))
	}
	c.(prometheus.Counter).Inc()
	a.m.duration.Observe(d.Seconds())
}
