package daemon

import (
	"context"
	"crypto/sha256"
	"fmt"
	"log/slog"
	"sync"
	"sync/atomic"
	"time"

	"github.com/shoal-run/shoal/internal/agent"
	"github.com/shoal-run/shoal/internal/api"
	"github.com/shoal-run/shoal/internal/clock"
	"github.com/shoal-run/shoal/internal/cluster"
	"github.com/shoal-run/shoal/internal/errdefs"
	"github.com/shoal-run/shoal/internal/proxy"
	"github.com/shoal-run/shoal/internal/route"
	"github.com/shoal-run/shoal/internal/routes"
	"github.com/shoal-run/shoal/internal/serving"
	"github.com/shoal-run/shoal/internal/store"
)

// clusterRouting is this node's part of the cluster's routing: the
// routes.Router serving publishes through (the proxy's table under it),
// the proxy's hop key, wake-ups sent to the leader and the proxy's load
// reported to it. It is made with serving, before the node joins, and
// starts once it has (start): until then the node follows and reaches
// no other node.
type clusterRouting struct {
	node   string
	st     store.Store
	log    *slog.Logger
	router *routes.Router
	act    *routes.Activator
	live   *cluster.Live
	// hop gives the proxy process its node and hop key; nil without one.
	hop   func(node string, key []byte) error
	loads func() map[string]route.Load

	peers atomic.Pointer[agent.Client]
	ctx   context.Context
	stop  context.CancelFunc
	wg    sync.WaitGroup
}

// syncWait bounds the wait for the store's routes at start: a proxy that
// a restarted daemon adopts keeps its table meanwhile.
const syncWait = 5 * time.Second

// hopKeyLabel separates the proxies' hop key from other uses of the
// cluster secret.
const hopKeyLabel = "shoal proxy hops\x00"

// hopKey is the key the nodes' proxies authenticate hops with.
func hopKey(secret string) []byte {
	k := sha256.Sum256([]byte(hopKeyLabel + secret))
	return k[:]
}

// newClusterRouting returns the routing of a node whose proxy's table is
// local. It follows the store's routes at once (the node follows until
// start), and returns once they are in the proxy.
func (d *Daemon) newClusterRouting(local routes.Local, loads func() map[string]route.Load,
	hop func(string, []byte) error) *clusterRouting {
	cr := &clusterRouting{node: d.cfg.Node, st: d.store, log: d.log, hop: hop, loads: loads,
		live: d.lead.members.Live()}
	cr.router = routes.New(routes.Options{Store: d.store, Node: d.cfg.Node, Local: local,
		Peers: cr, Clock: clock.Real{}, Logger: d.log})
	// The routes lead from the start of each term of this node, before
	// serving publishes as leader.
	d.lead.hub.Register(cr.router)
	cr.ctx, cr.stop = context.WithCancel(context.Background())
	cr.act = &routes.Activator{Leader: cr, Leading: cr.router.Leading, Logger: d.log, Done: cr.ctx.Done()}
	cr.wg.Add(2)
	go func() { defer cr.wg.Done(); cr.followLive() }()
	go func() { defer cr.wg.Done(); cr.router.Run(cr.ctx) }()
	select {
	case <-cr.router.Synced():
	case <-time.After(syncWait):
		d.log.Warn("routes: the store's routes not read yet; the proxy gets them when they are")
	}
	return cr
}

// followLive tells the router the live nodes, once they are known and
// after every change, until the routing stops.
func (cr *clusterRouting) followLive() {
	changed := cr.live.Changed()
	select {
	case <-cr.live.Ready():
	case <-cr.ctx.Done():
		return
	}
	for {
		cr.router.SetLive(cr.live.Nodes())
		select {
		case <-changed:
		case <-cr.ctx.Done():
			return
		}
	}
}

// clusterRoutingOver returns the routing of a node whose proxy is local:
// the proxy process's control client, or the table of a node that runs
// no proxy.
func (d *Daemon) clusterRoutingOver(local serving.Router) *clusterRouting {
	if d.plane != nil {
		c := d.plane.Client()
		// The routes the proxy has from before it knew its hop key are
		// pushed again: their other nodes' endpoints become hops.
		hop := func(node string, key []byte) error {
			if err := c.SetHop(node, key); err != nil {
				return err
			}
			return c.Sync()
		}
		return d.newClusterRouting(c, c.Loads, hop)
	}
	t := local.(*proxy.Proxy)
	return d.newClusterRouting(t, t.Loads, nil)
}

// appsAPI is serving as the API serves it: on a node of a cluster, the
// proxy's wake-ups go through the routing.
func (d *Daemon) appsAPI() api.Apps {
	if d.apps == nil {
		return nil
	}
	if d.routing == nil {
		return d.apps
	}
	return clusterApps{Manager: d.apps, act: d.routing.act}
}

// start runs the routing of a node that has joined: serving m wakes the
// apps while it leads, the agent answers the other nodes' routing calls.
func (cr *clusterRouting) start(m *serving.Manager, c *clusterNode) {
	cr.act.Local = m
	c.agent.Routing = routingService{apps: m, router: cr.router}
	cr.peers.Store(c.peers)
	if cr.hop != nil {
		if err := cr.hop(cr.node, hopKey(c.secret)); err != nil {
			cr.log.Error("proxy: the hop key did not reach the proxy process; it is sent again with the routes", "err", err)
		}
	}
	cr.wg.Add(1)
	go func() { defer cr.wg.Done(); cr.router.ReportLoads(cr.ctx, cr.loads, cr) }()
}

// close stops the routing.
func (cr *clusterRouting) close() {
	cr.stop()
	cr.wg.Wait()
}

// Live returns the live nodes (routes.Peers).
func (cr *clusterRouting) Live() []string { return cr.live.Nodes() }

// WaitIdle asks node to wait for an endpoint (routes.Peers).
func (cr *clusterRouting) WaitIdle(ctx context.Context, node, endpointID string, seq int64) error {
	c := cr.peers.Load()
	if c == nil {
		return nil
	}
	return c.WaitIdle(ctx, node, endpointID, seq)
}

// errNoLeader is the error of a call for the leader while none leads.
var errNoLeader = fmt.Errorf("the cluster has no leader: %w", errdefs.ErrUnavailable)

// leader returns the leader's name, unless it is this node.
func (cr *clusterRouting) leader(ctx context.Context) (string, error) {
	l, err := cluster.Leader(ctx, cr.st)
	if err != nil {
		return "", err
	}
	if l == "" {
		return "", errNoLeader
	}
	return l, nil
}

// ActivateOnLeader sends a wake-up to the leader (routes.LeaderWaker).
func (cr *clusterRouting) ActivateOnLeader(ctx context.Context, app string) error {
	l, err := cr.leader(ctx)
	if err != nil {
		return err
	}
	c := cr.peers.Load()
	if l == cr.node || c == nil {
		// This node leads after all (an election just ended).
		if cr.act.Local != nil {
			cr.act.Local.Activate(app)
		}
		return nil
	}
	return c.Activate(ctx, l, app)
}

// ReportLoad sends this node's proxy load to the leader (routes.LoadSink).
func (cr *clusterRouting) ReportLoad(ctx context.Context, node string, loads map[string]route.Load) error {
	l, err := cr.leader(ctx)
	if err != nil {
		return err
	}
	c := cr.peers.Load()
	if l == cr.node || c == nil {
		return nil
	}
	return c.ReportLoad(ctx, l, node, loads)
}

// routingService answers the other nodes' routing calls (agent.Routing).
type routingService struct {
	apps   *serving.Manager
	router *routes.Router
}

func (s routingService) Activate(app string) { s.apps.Activate(app) }

func (s routingService) Report(node string, loads map[string]route.Load) {
	s.router.Report(node, loads)
}

func (s routingService) WaitApplied(ctx context.Context, endpointID string, seq int64) error {
	return s.router.WaitApplied(ctx, endpointID, seq)
}

// clusterApps is serving's API on a node of a cluster: the proxy's
// wake-ups go through the routing, to the leader when this node follows.
type clusterApps struct {
	*serving.Manager
	act *routes.Activator
}

// Activate wakes app through the leader.
func (a clusterApps) Activate(app string) { a.act.Activate(app) }

var (
	_ agent.Routing      = routingService{}
	_ routes.Peers       = (*clusterRouting)(nil)
	_ routes.LoadSink    = (*clusterRouting)(nil)
	_ routes.LeaderWaker = (*clusterRouting)(nil)
)
