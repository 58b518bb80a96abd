// Package routes carries app routes across the nodes of a cluster. The
// leader's serving publishes every route through a Router: it goes to the
// leader's own proxy at once and is written, fenced by the leader's term,
// to the store under routes/<app>, whose revision numbers it. Every node's
// Router watches routes/ (list, watch, list again when the watch ends) and
// applies each route to its own proxy, with the endpoints of other nodes
// pointed at those nodes' proxies (their records' proxy address), which
// serve them through an authenticated hop.
//
// A replica that leaves a route is idle only once every live node has
// applied that route and has no request left on it: the leader's WaitIdle
// asks each (WaitApplied on their side). Followers report their proxy's
// load to the leader about once a second, and the leader's Load adds the
// fresh reports to its own.
package routes

import (
	"context"
	"log/slog"
	"sync"
	"time"

	"github.com/shoal-run/shoal/internal/clock"
	"github.com/shoal-run/shoal/internal/cluster"
	"github.com/shoal-run/shoal/internal/route"
	"github.com/shoal-run/shoal/internal/store"
)

// Local is this node's proxy (the proxy process's control client, or an
// in-process proxy).
type Local interface {
	SetRoute(r route.Route)
	RemoveRoute(app string)
	Load(app string) route.Load
	WaitIdle(ctx context.Context, endpointID string) error
	// Cut ends the requests in flight on an endpoint no route has.
	Cut(endpointID string)
}

// Peers reaches the other nodes of the cluster.
type Peers interface {
	// Live returns the names of the live nodes.
	Live() []string
	// WaitIdle returns once node has applied the routes up to seq and its
	// proxy has no request in flight on the endpoint (WaitApplied there).
	WaitIdle(ctx context.Context, node, endpointID string, seq int64) error
}

// Options configure a Router.
type Options struct {
	Store store.Store
	// Node is this node's name: endpoints of other nodes are reached
	// through their proxies.
	Node  string
	Local Local
	// Peers reaches the other nodes; nil: none is waited on.
	Peers  Peers
	Clock  clock.Clock
	Logger *slog.Logger
}

// Router is serving's Router on a node of a cluster; see the package doc.
type Router struct {
	o   Options
	log *slog.Logger
	clk clock.Clock

	mu sync.Mutex
	// addrs maps a node to the proxy address other nodes reach it at.
	addrs map[string]string
	// live holds the live nodes, as SetLive last told; nil: all are.
	live map[string]bool
	// set holds the routes this node set as leader, and stored those read
	// from the store (applied to the proxy while it follows), by app.
	set    map[string]route.Route
	stored map[string]storedRoute
	// rev is the store revision of the last route change applied here;
	// applied is closed and replaced on every change.
	rev     int64
	applied chan struct{}
	synced  chan struct{} // closed once the first list is applied
	leading bool          // this node leads: Establish, until Revoke
	term    cluster.Term  // the term it leads under; nil while it follows
	ledFor  int           // prune ticks this node has led through
	w       writes
	reports map[string]report
}

// storedRoute is an app's route as read from the store, with its revision.
type storedRoute struct {
	rt  route.Route
	rev int64
}

// New returns a Router; Run keeps it in step with the store.
func New(o Options) *Router {
	if o.Clock == nil {
		o.Clock = clock.Real{}
	}
	if o.Logger == nil {
		o.Logger = slog.New(slog.DiscardHandler)
	}
	r := &Router{o: o, log: o.Logger, clk: o.Clock, addrs: map[string]string{}, set: map[string]route.Route{},
		stored: map[string]storedRoute{}, applied: make(chan struct{}), synced: make(chan struct{}), reports: map[string]report{}}
	r.w.init()
	return r
}

// Run follows the store's routes and node records, and writes the routes
// this node publishes as leader, until ctx ends.
func (r *Router) Run(ctx context.Context) {
	var wg sync.WaitGroup
	wg.Add(4)
	go func() { defer wg.Done(); r.follow(ctx, store.RoutesPrefix, r.replaceRoutes, r.applyRoute) }()
	go func() { defer wg.Done(); r.follow(ctx, store.NodesPrefix, r.replaceNodes, r.applyNode) }()
	go func() { defer wg.Done(); r.writer(ctx) }()
	go func() { defer wg.Done(); r.pruner(ctx) }()
	wg.Wait()
}

// PruneEvery is how often a leader removes the stored routes of apps it
// does not run (an app whose removal a previous leader did not finish).
// A new leader publishes every app it runs as it takes the lead; it
// prunes at its second tick, PruneEvery or more after.
const PruneEvery = 10 * time.Second

func (r *Router) pruner(ctx context.Context) {
	for {
		t := r.clk.NewTimer(PruneEvery)
		select {
		case <-ctx.Done():
			t.Stop()
			return
		case <-t.C():
		}
		r.prune()
	}
}

// prune removes, while this node has led since the last tick, the stored
// routes of apps it has not set.
func (r *Router) prune() {
	r.mu.Lock()
	defer r.mu.Unlock()
	if !r.leading {
		r.ledFor = 0
		return
	}
	if r.ledFor++; r.ledFor < 2 {
		return
	}
	for app := range r.stored {
		if _, ok := r.set[app]; !ok {
			r.log.Info("routes: removing the route of an app the leader does not run", "app", app)
			r.w.queue(app, nil, nil, r.clk.Now())
			r.o.Local.RemoveRoute(app)
		}
	}
}

// Synced is closed once the routes in the store have been listed and
// applied: a proxy then has the cluster's table.
func (r *Router) Synced() <-chan struct{} { return r.synced }

// SetRoute sets app's route in this node's proxy and, while the node
// leads, writes it to the store for the other nodes. A node that does not
// lead takes its routes from the store only: a route its serving publishes
// then (the last of a term that just ended) is dropped.
func (r *Router) SetRoute(rt route.Route) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if !r.leading {
		return
	}
	old, had := r.set[rt.App]
	r.set[rt.App] = rt
	r.w.queue(rt.App, &rt, dropped(old, had, rt), r.clk.Now())
	// Changes reach the proxy in the order they are made.
	r.o.Local.SetRoute(r.localize(rt))
}

// RemoveRoute removes app from this node's proxy and from the store while
// the node leads; a node that does not lead drops it, as SetRoute.
func (r *Router) RemoveRoute(app string) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if !r.leading {
		return
	}
	old, had := r.set[app]
	delete(r.set, app)
	r.w.queue(app, nil, dropped(old, had, route.Route{}), r.clk.Now())
	r.o.Local.RemoveRoute(app)
}

// WaitIdle returns once no live node's proxy routes the endpoint (it has
// left its app's route, as serving's drain asks) or has a request in
// flight on it; or with ctx's error. It is called on the node the
// replica runs on, which need not lead: each node, this one too, first
// applies the route that dropped the endpoint (its store revision when
// this node as leader dropped it; otherwise whatever route no longer has
// it), then waits for its proxy (WaitApplied). A node that cannot be
// reached is not waited for.
func (r *Router) WaitIdle(ctx context.Context, endpointID string) error {
	errc := make(chan error, 1)
	go func() { errc <- r.WaitApplied(ctx, endpointID, removed) }()
	if r.o.Peers != nil {
		seq, ok := r.w.droppedAt(ctx, endpointID)
		if !ok {
			seq = removed
		}
		r.waitPeers(ctx, endpointID, seq)
	}
	if err := <-errc; err != nil {
		return err
	}
	return ctx.Err()
}

func (r *Router) waitPeers(ctx context.Context, endpointID string, seq int64) {
	var wg sync.WaitGroup
	for _, n := range r.o.Peers.Live() {
		if n == r.o.Node {
			continue
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			if err := r.o.Peers.WaitIdle(ctx, n, endpointID, seq); err != nil && ctx.Err() == nil {
				r.log.Warn("routes: wait for an endpoint to be idle on a node", "node", n, "endpoint", endpointID, "err", err)
			}
		}()
	}
	wg.Wait()
}

// Establish makes this node's Router the leader's under lead l
// (cluster.LeaderWork): the routes its serving publishes from now on are
// written, through l, for the other nodes.
func (r *Router) Establish(l *cluster.Lead) { r.lead(l) }

// Revoke makes the Router a follower's again (cluster.LeaderWork): its
// proxy gets the store's routes back.
func (r *Router) Revoke() { r.lead(nil) }

// Leading reports whether this node leads.
func (r *Router) Leading() bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.leading
}

// lead makes the Router lead under term t, or follow (nil).
func (r *Router) lead(t cluster.Term) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.term = t
	r.becomeLocked(t != nil)
}

// becomeLocked notes whether this node leads. A node that stopped leading
// puts the store's routes back in its proxy. r.mu is held.
func (r *Router) becomeLocked(leading bool) {
	if r.leading == leading {
		return
	}
	r.leading = leading
	if leading {
		r.ledFor = 0
		return
	}
	for app := range r.set {
		if _, ok := r.stored[app]; !ok {
			r.o.Local.RemoveRoute(app)
		}
	}
	r.set = map[string]route.Route{}
	for _, s := range r.stored {
		r.o.Local.SetRoute(r.localize(s.rt))
	}
}

// dropped returns the endpoints of old that next leaves out.
func dropped(old route.Route, had bool, next route.Route) []string {
	if !had {
		return nil
	}
	keep := make(map[string]bool, len(next.Endpoints))
	for _, e := range next.Endpoints {
		keep[e.ID] = true
	}
	var out []string
	for _, e := range old.Endpoints {
		if !keep[e.ID] {
			out = append(out, e.ID)
		}
	}
	return out
}

// localize is rt as this node's proxy routes it: an endpoint of another
// node is reached at that node's proxy, and left out while its address is
// unknown or the node is not live (SetLive). r.mu is held.
func (r *Router) localize(rt route.Route) route.Route {
	remote := false
	for _, e := range rt.Endpoints {
		if e.Node != "" && e.Node != r.o.Node {
			remote = true
			break
		}
	}
	if !remote {
		return rt
	}
	eps := make([]route.Endpoint, 0, len(rt.Endpoints))
	for _, e := range rt.Endpoints {
		if e.Node != "" && e.Node != r.o.Node {
			addr := r.addrs[e.Node]
			if addr == "" || (r.live != nil && !r.live[e.Node]) {
				continue
			}
			e.Addr = addr
		}
		eps = append(eps, e)
	}
	rt.Endpoints = eps
	return rt
}
