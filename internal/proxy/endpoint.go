package proxy

import (
	"context"
	"math/rand/v2"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/shoal-run/shoal/internal/route"
)

// endpoint is one replica and its counters. One endpoint object lives as
// long as its ID is known, across route changes.
type endpoint struct {
	id     string
	addr   string
	cookie string // the Set-Cookie value naming it; "" when it cannot
	// node is the node whose proxy, at addr, it is reached through by a
	// hop; "" for an endpoint of this node.
	node  string
	stamp atomic.Pointer[hopStamp] // its last hop header

	inFlight atomic.Int64
	hopIn    atomic.Int64 // of inFlight, the hops other nodes' proxies sent
	requests atomic.Uint64
	answered atomic.Uint64 // of requests, those it answered below 500
	last     atomic.Int64  // unix nanoseconds
	closed   atomic.Bool
	pool     pool
	// h2 holds its connections when it speaks h2c (route.ProtocolH2C);
	// nil for HTTP/1.1, pool's.
	h2 *h2pool
	// tcp holds the connections a TCP route relays to it (tcp.go).
	tcp tcpConns

	closedAt int64 // unix nanoseconds; guarded by Proxy.mu

	idleWaiters atomic.Int32
	mu          sync.Mutex
	idle        chan struct{} // closed when inFlight reaches zero; guarded by mu
}

func newEndpoint(id, addr, node string) *endpoint {
	return &endpoint{id: id, addr: addr, cookie: setCookieValue(id), node: node}
}

func (e *endpoint) open() {
	e.pool.open()
	if e.h2 != nil {
		e.h2.open()
	}
	e.tcp.open()
	e.closed.Store(false)
}

// close stops new requests to e and drops its idle connections.
func (e *endpoint) close(now time.Time) {
	e.closed.Store(true)
	e.closedAt = now.UnixNano()
	e.pool.close()
	if e.h2 != nil {
		e.h2.close()
	}
}

func (e *endpoint) prunable(now time.Time) bool {
	return e.closed.Load() && e.inFlight.Load() <= 0 &&
		now.UnixNano()-e.closedAt > int64(pruneAfter)
}

// acquire counts a request on e unless e is closed. The increment comes
// before the check: a change that closes e either is seen here, or comes
// after the increment and so is waited for by WaitIdle.
func (e *endpoint) acquire() bool {
	e.inFlight.Add(1)
	if e.closed.Load() {
		e.done()
		return false
	}
	e.requests.Add(1)
	return true
}

// finish ends request st on e at now, counting an answer of the
// replica's with a status below 500.
func (e *endpoint) finish(st *reqState, now time.Time) {
	if !st.head.IsZero() && st.code < 500 {
		e.answered.Add(1)
	}
	e.release(now)
}

// release ends a request on e at now.
func (e *endpoint) release(now time.Time) {
	e.last.Store(now.UnixNano())
	e.done()
}

func (e *endpoint) done() {
	if e.inFlight.Add(-1) == 0 && e.idleWaiters.Load() > 0 {
		e.mu.Lock()
		if e.idle != nil {
			close(e.idle)
			e.idle = nil
		}
		e.mu.Unlock()
	}
}

func (e *endpoint) stats() route.EndpointLoad {
	return route.EndpointLoad{
		InFlight:    int(max(e.inFlight.Load()-e.hopIn.Load(), 0)),
		Requests:    e.requests.Load(),
		Answered:    e.answered.Load(),
		LastRequest: unixTime(e.last.Load()),
	}
}

// waitIdle returns when e has no request in flight.
func (e *endpoint) waitIdle(ctx context.Context) error {
	e.idleWaiters.Add(1)
	defer e.idleWaiters.Add(-1)
	for {
		e.mu.Lock()
		if e.idle == nil {
			e.idle = make(chan struct{})
		}
		ch := e.idle
		e.mu.Unlock()
		// idleWaiters was raised before this load, so a request that ends
		// after it sees the waiter and closes ch.
		if e.inFlight.Load() <= 0 {
			return nil
		}
		select {
		case <-ch:
		case <-ctx.Done():
			return ctx.Err()
		}
	}
}

// Idle returns once the endpoint has no request in flight, or with the
// context's error. An unknown endpoint is idle. Called after the endpoint
// left its app's route, it tells when the replica may be frozen or
// stopped. It cuts nothing: see Cut and WaitIdle.
func (t *table) Idle(ctx context.Context, endpointID string) error {
	t.mu.Lock()
	e := t.endpoints[endpointID]
	t.mu.Unlock()
	if e == nil {
		return nil
	}
	return e.waitIdle(ctx)
}

// Cut ends every request still on an endpoint that left its route (its
// drain's grace is over, or its node left the cluster), rather than leave
// them to hang on a frozen or stopped replica. It is the one way requests
// are cut, for both engines and every kind of request: the endpoint's pool
// closes every connection it dialed that is still open and dials no more
// until the endpoint is routed again. So answers being copied (event
// streams, long bodies) end short and their client connections close; an
// upgraded WebSocket gets a close frame (1001, going away) first, other
// upgraded connections close; a request not answered yet fails on its
// connection, which the forwarder takes as a replica that died before
// answering (see forward). An endpoint in a route, or unknown, is left
// alone.
func (t *table) Cut(endpointID string) {
	t.mu.Lock()
	defer t.mu.Unlock()
	e := t.endpoints[endpointID]
	if e == nil || !e.closed.Load() {
		return
	}
	conns := e.pool.cutAll()
	if e.h2 != nil {
		conns += e.h2.cutAll()
	}
	conns += e.tcp.cutAll()
	if conns > 0 {
		t.log.Warn("proxy: drain grace over; requests cut", "endpoint", e.id, "replica_connections", conns)
	}
}

// WaitIdle is Idle, and Cut when the context ends first: the context's end
// is the end of the drain's grace.
func (t *table) WaitIdle(ctx context.Context, endpointID string) error {
	err := t.Idle(ctx, endpointID)
	if err != nil {
		t.Cut(endpointID)
	}
	return err
}

// maxPickTries bounds how often a request picks again after it drew an
// endpoint that was closed under it.
const maxPickTries = 4

// pick chooses an open endpoint of a's current route, skipping those in
// tried, and counts the request on it: in a revision drawn by weight when
// the route is split, by least outstanding requests between two random
// choices, among this node's endpoints while one has fewer requests in
// flight than the route's capacity, else among the others' too (see
// split.near). When every candidate was tried, any other endpoint of the
// route will do. It returns nil when there is none.
func (a *app) pick(tried []*endpoint) *endpoint {
	for range maxPickTries {
		rt := a.route.Load()
		if rt == nil {
			return nil
		}
		near, far := rt.candidates()
		if rt.tcpPort > 0 {
			// A TCP connection cannot hop to another node's proxy: this
			// node's endpoints only, the one with the fewest open.
			near, far = local(near, far), nil
		}
		e := choose(near, tried)
		if rt.tcpPort > 0 {
			e = least(near, tried)
		}
		if far != nil {
			e = spill(e, far, tried, rt.capacity)
		}
		if e == nil && len(tried) > 0 {
			if rt.tcpPort > 0 {
				// Another node's endpoint is its proxy, an HTTP front.
				e = choose(local(rt.endpoints, nil), tried)
			} else {
				e = choose(rt.endpoints, tried)
			}
		}
		if e == nil {
			return nil
		}
		if e.acquire() {
			return e
		}
	}
	return nil
}

func choose(eps []*endpoint, tried []*endpoint) *endpoint {
	if len(tried) > 0 {
		eps = untried(eps, tried)
	}
	switch n := len(eps); n {
	case 0:
		return nil
	case 1:
		return eps[0]
	default:
		i := rand.IntN(n)
		j := rand.IntN(n - 1)
		if j >= i {
			j++
		}
		a, b := eps[i], eps[j]
		if b.inFlight.Load() < a.inFlight.Load() {
			return b
		}
		return a
	}
}

// spill returns e, the choice among this node's endpoints, unless it is
// nil or at capacity (cap > 0) and the choice among far, other nodes'
// endpoints, has fewer requests in flight.
func spill(e *endpoint, far, tried []*endpoint, cap int64) *endpoint {
	if e != nil && (cap <= 0 || e.inFlight.Load() < cap) {
		return e
	}
	f := choose(far, tried)
	if e == nil || (f != nil && f.inFlight.Load() < e.inFlight.Load()) {
		return f
	}
	return e
}

// local returns the endpoints of here and far on this node.
func local(here, far []*endpoint) []*endpoint {
	out := make([]*endpoint, 0, len(here))
	for _, e := range slices.Concat(here, far) {
		if e.node == "" {
			out = append(out, e)
		}
	}
	return out
}

// least returns the endpoint of eps not in tried with the fewest
// requests in flight, the first of those tied.
func least(eps []*endpoint, tried []*endpoint) *endpoint {
	if len(tried) > 0 {
		eps = untried(eps, tried)
	}
	var best *endpoint
	for _, e := range eps {
		if best == nil || e.inFlight.Load() < best.inFlight.Load() {
			best = e
		}
	}
	return best
}

func untried(eps, tried []*endpoint) []*endpoint {
	out := make([]*endpoint, 0, len(eps))
outer:
	for _, e := range eps {
		for _, t := range tried {
			if e == t {
				continue outer
			}
		}
		out = append(out, e)
	}
	return out
}
