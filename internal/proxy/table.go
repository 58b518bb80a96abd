package proxy

import (
	"cmp"
	"log/slog"
	"maps"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/shoal-run/shoal/internal/clock"
	"github.com/shoal-run/shoal/internal/route"
)

// table is the proxy's routing table: app name → app under one atomic
// pointer, read without locks and swapped copy-on-write when apps come or
// go, and every endpoint by ID.
type table struct {
	apps atomic.Pointer[map[string]*app]
	// domains maps each app's own host names (route.Route.Domains) to
	// it; rebuilt, copy-on-write, when an app's domains change.
	domains atomic.Pointer[map[string]*app]

	mu        sync.Mutex              // serializes table changes
	endpoints map[string]*endpoint    // by ID; guarded by mu
	hop       atomic.Pointer[hopConf] // nil: not in a cluster

	clock clock.Clock
	dial  dialFunc // the endpoints' pools' (Options.Dial); nil: dialer's
	// changed, if set, is called (mu held) after every change of the
	// table: the TCP routes' listeners follow it.
	changed func()
	metrics *metrics
	log     *slog.Logger
}

func (t *table) init(c clock.Clock, m *metrics, log *slog.Logger) {
	t.clock, t.metrics, t.log = c, m, log
	t.endpoints = map[string]*endpoint{}
	empty := map[string]*app{}
	t.apps.Store(&empty)
	noDomains := map[string]*app{}
	t.domains.Store(&noDomains)
}

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
	frozen       int
	starting     int
	failing      string        // why the app has no replica before retryAt
	retryAt      time.Time     // its next start
	capacity     int64         // in flight on a near endpoint before a far one is tried; 0: no bound
	h2c          bool          // an endpoint speaks h2c: net/http's engine serves the requests
	wsTimeout    time.Duration // a WebSocket idle this long is closed
	tcpPort      int           // the port of a TCP route (tcp.go); 0: HTTP

	domains  []string // the app's own host names, lower case
	redirect bool     // plain HTTP to a host with a certificate goes to HTTPS
	hsts     bool     // HTTPS answers carry Strict-Transport-Security
}

func (a *app) waitChan() <-chan struct{} { return *a.changed.Load() }

// notify wakes every request waiting on the app.
func (a *app) notify() {
	ch := make(chan struct{})
	old := a.changed.Swap(&ch)
	close(*old)
}

// Update replaces the whole table: apps not in routes are removed.
func (t *table) Update(routes []route.Route) {
	t.mu.Lock()
	defer t.mu.Unlock()
	old := *t.apps.Load()
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
			a = t.newApp(name)
		}
		closing = append(closing, t.setLocked(a, r, keep)...)
		next[name] = a
		wake = append(wake, a)
	}
	var gone []*app
	for name, a := range old {
		if next[name] == nil {
			closing = append(closing, t.removeLocked(a)...)
			gone = append(gone, a)
		}
	}
	t.apps.Store(&next)
	t.rebuildDomainsLocked()
	t.closeAndWake(closing, append(wake, gone...))
	for _, a := range gone {
		t.metrics.forget(a.name)
	}
	t.pruneLocked()
	t.notifyChanged()
}

func (t *table) notifyChanged() {
	if t.changed != nil {
		t.changed()
	}
}

// SetRoute adds or changes the route of one app.
func (t *table) SetRoute(r route.Route) {
	t.mu.Lock()
	defer t.mu.Unlock()
	name := strings.ToLower(r.App)
	old := *t.apps.Load()
	a := old[name]
	added := a == nil
	if added {
		a = t.newApp(name)
	}
	keep := make(map[string]bool, len(r.Endpoints))
	for _, e := range r.Endpoints {
		keep[e.ID] = true
	}
	var had []string
	if rt := a.route.Load(); rt != nil {
		had = rt.domains
	}
	closing := t.setLocked(a, r, keep)
	if added {
		next := maps.Clone(old)
		next[name] = a
		t.apps.Store(&next)
	}
	if !slices.Equal(had, a.route.Load().domains) {
		t.rebuildDomainsLocked()
	}
	t.closeAndWake(closing, []*app{a})
	t.pruneLocked()
	t.notifyChanged()
}

// RemoveRoute removes an app: its host answers 404 and its endpoints are
// closed. Requests in flight finish.
func (t *table) RemoveRoute(name string) {
	t.mu.Lock()
	defer t.mu.Unlock()
	name = strings.ToLower(name)
	old := *t.apps.Load()
	a := old[name]
	if a == nil {
		return
	}
	next := maps.Clone(old)
	delete(next, name)
	var had []string
	if rt := a.route.Load(); rt != nil {
		had = rt.domains
	}
	closing := t.removeLocked(a)
	t.apps.Store(&next)
	if len(had) > 0 {
		t.rebuildDomainsLocked()
	}
	t.closeAndWake(closing, []*app{a})
	t.metrics.forget(name)
	t.pruneLocked()
	t.notifyChanged()
}

func (t *table) newApp(name string) *app {
	a := &app{name: name, eps: map[string]*endpoint{}}
	ch := make(chan struct{})
	a.changed.Store(&ch)
	a.m = t.metrics.forApp(name)
	return a
}

// setLocked publishes r as a's route and returns the endpoints that left it.
// Endpoints in r are opened before the route is published; those that left
// are closed by the caller after it, so a request never spins on a closed
// endpoint of a route that is still current. keep holds every endpoint ID
// that stays routed anywhere.
func (t *table) setLocked(a *app, r route.Route, keep map[string]bool) []*endpoint {
	snap := &routeSnap{
		endpoints:    make([]*endpoint, 0, len(r.Endpoints)),
		maxBody:      r.MaxBodyBytes,
		queueLimit:   int64(r.QueueLimit),
		queueTimeout: r.QueueTimeout,
		unavailable:  r.Unavailable,
		frozen:       r.Frozen,
		starting:     r.Starting,
		failing:      r.Failing,
		retryAt:      r.RetryAt,
		capacity:     int64(r.Capacity),
		wsTimeout:    r.WebSocketTimeout,
		tcpPort:      r.TCPPort,
		redirect:     !r.KeepHTTP,
		hsts:         !r.NoHSTS,
	}
	for _, d := range r.Domains {
		snap.domains = append(snap.domains, strings.ToLower(d))
	}
	if snap.wsTimeout <= 0 {
		snap.wsTimeout = route.DefaultWebSocketTimeout
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
	hc := t.hop.Load()
	seen := make(map[string]bool, len(r.Endpoints))
	for _, re := range r.Endpoints {
		if re.ID == "" || re.Addr == "" || seen[re.ID] {
			continue
		}
		seen[re.ID] = true
		e := t.endpoints[re.ID]
		node := hc.far(re)
		// An h2c app's endpoint on another node is reached over h2c too:
		// its proxy takes HTTP/2 with prior knowledge, and a call streams
		// both ways (HTTP/1.1 would send the whole body first).
		h2c := re.Protocol == route.ProtocolH2C
		if e != nil && (e.addr != re.Addr || e.node != node || (e.h2 != nil) != h2c) {
			// Same replica ID at a new address (or now reached through
			// another node's proxy): a new endpoint; the old one drains.
			closing = append(closing, e)
			e = nil
		}
		if e == nil {
			e = newEndpoint(re.ID, re.Addr, node)
			e.pool.clock, e.pool.dial = t.clock, t.dial
			if h2c {
				e.h2 = &h2pool{}
			}
			if node == "" {
				// Another node's proxy bounds its own.
				e.pool.max = cmp.Or(r.MaxConns, maxConnsPerEndpoint)
			}
			t.endpoints[re.ID] = e
		}
		e.open()
		snap.h2c = snap.h2c || h2c
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
			if !keep[e.id] || t.endpoints[e.id] != e {
				closing = append(closing, e)
			}
		}
	}
	a.route.Store(snap)
	return closing
}

// rebuildDomainsLocked makes the map of the apps' own host names again;
// should two apps name one (the store lets only one own it), the first by
// name has it.
func (t *table) rebuildDomainsLocked() {
	apps := *t.apps.Load()
	names := slices.Sorted(maps.Keys(apps))
	next := map[string]*app{}
	for _, n := range names {
		a := apps[n]
		rt := a.route.Load()
		if rt == nil {
			continue
		}
		for _, d := range rt.domains {
			if next[d] == nil {
				next[d] = a
			}
		}
	}
	t.domains.Store(&next)
}

// removeLocked marks a removed and returns its endpoints to close.
func (t *table) removeLocked(a *app) []*endpoint {
	old := a.route.Swap(nil)
	if old == nil {
		return nil
	}
	return old.endpoints
}

func (t *table) closeAndWake(closing []*endpoint, apps []*app) {
	now := t.clock.Now()
	for _, e := range closing {
		e.close(now)
	}
	for _, a := range apps {
		a.notify()
	}
}

// pruneLocked forgets endpoints that have been closed and idle for a while.
func (t *table) pruneLocked() {
	now := t.clock.Now()
	for id, e := range t.endpoints {
		if e.prunable(now) {
			delete(t.endpoints, id)
		}
	}
	for _, a := range *t.apps.Load() {
		for id, e := range a.eps {
			if e.prunable(now) || t.endpoints[id] != e {
				delete(a.eps, id)
			}
		}
	}
}

// Load returns the counters of an app; the zero Load for an unknown app.
func (t *table) Load(name string) route.Load {
	a := (*t.apps.Load())[strings.ToLower(name)]
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
	t.mu.Lock()
	defer t.mu.Unlock()
	for id, e := range a.eps {
		if e.closed.Load() && e.inFlight.Load() <= 0 {
			continue
		}
		s.Endpoints[id] = e.stats()
	}
	return s
}

// Loads returns the counters of every app in the table, in one call.
func (t *table) Loads() map[string]route.Load {
	apps := *t.apps.Load()
	out := make(map[string]route.Load, len(apps))
	for name := range apps {
		out[name] = t.Load(name)
	}
	return out
}

// LoadsSince returns the counters of the apps whose counters may have
// moved since since: a request to the app or one of its endpoints started
// or ended at or after it, or one is in flight or queued. The daemon reads
// these between reads of every app's (Loads), so that what it reads each
// tick is the apps with traffic, not every app.
func (t *table) LoadsSince(since time.Time) map[string]route.Load {
	s := since.UnixNano()
	out := map[string]route.Load{}
	for name, a := range *t.apps.Load() {
		if a.last.Load() >= s || a.inFlight.Load() > 0 || a.queued.Load() > 0 || t.endpointsMoved(a, s) {
			out[name] = t.Load(name)
		}
	}
	return out
}

// endpointsMoved reports whether one of a's endpoints had a request start
// or end at or after s (unix nanoseconds), or has one in flight.
func (t *table) endpointsMoved(a *app, s int64) bool {
	t.mu.Lock()
	defer t.mu.Unlock()
	for _, e := range a.eps {
		if e.last.Load() >= s || e.inFlight.Load() > 0 {
			return true
		}
	}
	return false
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
	added      prometheus.Observer
	firstByte  [3]prometheus.Observer // by tier
	retries    prometheus.Counter
	cold       prometheus.Counter
	codes      sync.Map // int → prometheus.Counter
	requests   *prometheus.CounterVec
}

// observe records a finished request: its status and duration, and, when
// the replica answered, its time to first byte by tier and the proxy's
// own share of it.
func (a *app) observe(code int, d time.Duration, st *reqState) {
	c, ok := a.m.codes.Load(code)
	if !ok {
		c, _ = a.m.codes.LoadOrStore(code, a.m.requests.WithLabelValues(a.name, statusText(code)))
	}
	c.(prometheus.Counter).Inc()
	a.m.duration.Observe(d.Seconds())
	if !st.head.IsZero() {
		a.m.firstByte[st.tier].Observe(st.head.Sub(st.start).Seconds())
	}
	if !st.sent.IsZero() {
		a.m.added.Observe((st.sent.Sub(st.start) - st.held).Seconds())
	}
}
