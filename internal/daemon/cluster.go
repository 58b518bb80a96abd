package daemon

import (
	"context"
	"fmt"
	goruntime "runtime"
	"sync"
	"time"

	"github.com/shoal-run/shoal/internal/agent"
	"github.com/shoal-run/shoal/internal/api/types"
	"github.com/shoal-run/shoal/internal/clock"
	"github.com/shoal-run/shoal/internal/cluster"
	"github.com/shoal-run/shoal/internal/errdefs"
	"github.com/shoal-run/shoal/internal/serving"
	"github.com/shoal-run/shoal/internal/store"
	"github.com/shoal-run/shoal/internal/units"
)

// clusterNode is this daemon's membership of a cluster: its heartbeat and
// its candidacy in the leader election. It runs only on an etcd store.
type clusterNode struct {
	elector *cluster.Elector
	secret  string        // the cluster secret nodes send each other
	agent   *agent.Server // answers the other nodes on the TCP API
	peers   *agent.Client // calls them
	live    *cluster.Live
	stop    context.CancelFunc
	wg      sync.WaitGroup
}

// openCluster joins the cluster when the store is etcd: it writes the node's
// record, keeps its heartbeat and campaigns for leadership. On bolt it does
// nothing: the daemon is single-host.
func (d *Daemon) openCluster(ctx context.Context) error {
	et, ok := d.store.(*store.Etcd)
	if !ok {
		return nil
	}
	cfg := d.cfg
	frozen := serving.MemTotal() / 4
	if cfg.FrozenMemory != "" {
		frozen, _ = units.ParseBytes(cfg.FrozenMemory) // validated
	}
	rec := cluster.Record{Name: cfg.Node, Addr: cfg.Advertise, ProxyAddr: cfg.AdvertiseProxy, CPUs: goruntime.NumCPU(),
		Memory: serving.MemTotal(), FrozenMemory: frozen, Joined: time.Now().UTC()}
	secret, err := cluster.Secret(ctx, d.store, cfg.ClusterTokenFile)
	if err != nil {
		return fmt.Errorf("join the cluster: %w", err)
	}
	if d.jobs != nil && d.jobs.Queue != nil {
		_, _, rec.JobSlots = d.jobs.Stats()
	}
	if err := cluster.Join(ctx, d.store, rec); err != nil {
		return fmt.Errorf("join the cluster: %w", err)
	}
	cctx, cancel := context.WithCancel(context.Background())
	peers := agent.NewClient(d.store, secret)
	c := &clusterNode{stop: cancel, secret: secret, peers: peers,
		agent: &agent.Server{Name: cfg.Node, Secret: secret, Node: d.apps.LocalNode(), Blobs: d.images, Log: d.log,
			Fetch: &agent.Fetcher{Images: d.images, Client: peers, Self: cfg.Node, Nodes: d.liveNodes, Log: d.log}}}
	if vs := d.localVolumes(); vs != nil {
		c.agent.Volumes = vs
	}
	hb := &cluster.Heartbeat{Store: d.store, Clock: clock.Real{}, Name: cfg.Node, TTL: cfg.NodeTTL, Log: d.log}
	if d.jobs != nil && d.jobs.cluster != nil {
		hb.Observe = leaseGuard(cfg.NodeTTL, time.Now, d.jobs.cluster.LostLease)
	}
	c.elector = &cluster.Elector{Client: et.Client(), Name: cfg.Node, TTL: cfg.NodeTTL, Log: d.log}
	// Back after its key was dropped, the node removes the replicas the
	// leader replaced meanwhile.
	back := backAgain(func(at time.Time) { d.removeStraysNow(cctx, at) })
	jobsObserve := hb.Observe
	hb.Observe = func(s cluster.Status) {
		if jobsObserve != nil {
			jobsObserve(s)
		}
		back(s)
	}
	c.live = d.lead.members.Live()
	// A call to another node ends when that node is lost.
	peers.Live = c.live
	d.cluster = c // before the leader may be elected: it reaches the peers through it
	c.wg.Add(2)
	go func() { defer c.wg.Done(); hb.Run(cctx) }()
	go func() { defer c.wg.Done(); c.elector.Run(cctx) }()
	d.lead.follow(cctx, c.elector, &c.wg)
	c.wg.Add(1)
	go func() { defer c.wg.Done(); d.sweepStrays(cctx) }()
	if d.jobFetch != nil {
		d.jobFetch.Store(c.agent.Fetch)
	}
	d.log.Info("joined the cluster", "node", cfg.Node, "advertise", cfg.Advertise, "ttl", cfg.NodeTTL)
	return nil
}

// closeCluster leaves: the heartbeat lease is revoked (the node shows down at
// once) and leadership, if held, is resigned.
func (d *Daemon) closeCluster() {
	if d.cluster == nil {
		return
	}
	d.cluster.stop()
	d.cluster.wg.Wait()
}

// clusterNote is what shoal info says of the cluster: this node's name, its
// address and lease, whether it leads, and where its cluster secret comes
// from ("" on a single host).
func (d *Daemon) clusterNote() string {
	if d.cluster == nil {
		return ""
	}
	role := "follower"
	if d.lead.leading() {
		role = "leader"
	}
	addr := d.cfg.Advertise
	reach := "other nodes cannot reach it"
	if addr == "" {
		addr = "no --advertise"
	} else {
		secret := "the cluster secret kept in the store"
		if d.cfg.ClusterTokenFile != "" {
			secret = "the cluster secret of " + d.cfg.ClusterTokenFile
		}
		reach = "other nodes reach its agent and images there with " + secret
	}
	return fmt.Sprintf("cluster: node %s (%s), %s, lease %s (shoal node ls); %s",
		d.cfg.Node, addr, role, d.cfg.NodeTTL, reach)
}

// errSingleHost answers the node commands of a daemon on bolt.
var errSingleHost = fmt.Errorf("this daemon is single-host (store bolt): it has no cluster nodes; start daemons with --store etcd://... to form a cluster: %w", errdefs.ErrInvalid)

// nodeService is the API's view of the cluster's nodes.
type nodeService struct{ d *Daemon }

func (s nodeService) check() error {
	if s.d.cluster == nil {
		return errSingleHost
	}
	return nil
}

// List returns every node of the cluster.
func (s nodeService) List(ctx context.Context) ([]types.Node, error) {
	if err := s.check(); err != nil {
		return nil, err
	}
	nodes, err := cluster.List(ctx, s.d.store)
	if err != nil {
		return nil, err
	}
	out := make([]types.Node, 0, len(nodes))
	for _, n := range nodes {
		out = append(out, types.Node{Name: n.Name, Addr: n.Addr, State: n.State, Health: n.Health,
			CPUs: n.CPUs, Memory: n.Memory, FrozenMemory: n.FrozenMemory, Leader: n.Leader, Joined: n.Joined})
	}
	return out, nil
}

// Drain marks a node draining.
func (s nodeService) Drain(ctx context.Context, name string) error {
	if err := s.check(); err != nil {
		return err
	}
	return cluster.Drain(ctx, s.d.store, name)
}

// Remove removes a draining or down node's record.
func (s nodeService) Remove(ctx context.Context, name string) error {
	if err := s.check(); err != nil {
		return err
	}
	return cluster.Remove(ctx, s.d.store, name)
}

// liveNodes names the nodes that are up (ready or draining).
func (d *Daemon) liveNodes(ctx context.Context) ([]string, error) {
	nodes, err := cluster.List(ctx, d.store)
	if err != nil {
		return nil, err
	}
	var out []string
	for _, n := range nodes {
		if n.State != cluster.StateDown {
			out = append(out, n.Name)
		}
	}
	return out, nil
}
