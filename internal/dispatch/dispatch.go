// Package dispatch is a cluster's nodes as one node.Node, the leader's:
// it places each new replica on a live node and sends every other call to
// the node the replica is on, this host's own Node or another's (through
// its agent). serving drives it as it drives a single host's Node; the
// daemon wires it in on a node of a cluster.
package dispatch

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"sort"
	"sync"
	"time"

	"github.com/shoal-run/shoal/internal/clock"
	"github.com/shoal-run/shoal/internal/cluster"
	"github.com/shoal-run/shoal/internal/errdefs"
	"github.com/shoal-run/shoal/internal/manifest"
	"github.com/shoal-run/shoal/internal/node"
	"github.com/shoal-run/shoal/internal/placement"
)

// Dispatcher is the nodes of a cluster as one Node, the leader's: Start
// places a replica on a live node that takes new work (placement.PickNode:
// fit, [placement], spread, rules, load), and every other call goes to the
// node the replica is on: this host's straight to its local node, another's
// to that node's remote Node. Nothing is called on a node that is not live:
// such calls fail at once (Remove and Release only forget), and calls in
// flight to a node that leaves the live set are cut short.
type Dispatcher struct {
	self   string
	local  node.Node
	remote func(node string) node.Node
	dir    string // this node's apps folder
	clock  clock.Clock
	log    *slog.Logger

	mu   sync.Mutex
	at   map[string]*placed   // replica id → where it runs and what it asks
	live map[string]*liveNode // by name
}

var _ node.Node = (*Dispatcher)(nil)

// placed is a replica as the dispatcher knows it.
type placed struct {
	node, app string
	ask       placement.Ask
	released  bool // its place is free for a replacement
}

// liveNode is a live node; ctx ends when it leaves the live set.
type liveNode struct {
	info   info
	ctx    context.Context
	cancel context.CancelFunc
	// mutedAt is when a call to it was last not answered; zero once one
	// is. A muted node takes no new replica for muteFor.
	mutedAt time.Time
}

// muteFor is how long a node that did not answer a call takes no new
// replica, unless it answers one before.
const muteFor = 10 * time.Second

// info is a live node of the cluster as placement sees it.
type info struct {
	Name         string
	CPUs         int
	Memory       int64  // bytes
	FrozenMemory int64  // bytes frozen replicas may hold there (0: the leader's budget)
	Draining     bool   // a member that takes no new replica
	Host         string // of its --advertise address ("": none)
}

// infoOf is a live node's record as placement sees it.
func infoOf(n cluster.Node) info {
	host, _, _ := net.SplitHostPort(n.Addr)
	return info{Name: n.Name, CPUs: n.CPUs, Memory: n.Memory, FrozenMemory: n.FrozenMemory,
		Draining: n.State == cluster.StateDraining, Host: host}
}

// Options configure a Dispatcher.
type Options struct {
	// Self is this node's name; Local its Node (localnode).
	Self  string
	Local node.Node
	// Remote reaches another node of the cluster by name (its agent).
	Remote func(node string) node.Node
	// Dir is this node's apps folder: the paths of a spec for another node
	// are made relative to it.
	Dir    string
	Clock  clock.Clock
	Logger *slog.Logger
}

// New returns the Dispatcher of a cluster whose live set is empty until
// SetLive.
func New(o Options) *Dispatcher {
	if o.Clock == nil {
		o.Clock = clock.Real{}
	}
	if o.Logger == nil {
		o.Logger = slog.New(slog.DiscardHandler)
	}
	return &Dispatcher{self: o.Self, dir: o.Dir, local: o.Local, remote: o.Remote, clock: o.Clock, log: o.Logger,
		at: map[string]*placed{}, live: map[string]*liveNode{}}
}

// errNodeDown is the error of a call for a replica on node n, which is not
// live.
func errNodeDown(n string) error {
	return fmt.Errorf("node %s is not live: %w", n, errdefs.ErrUnavailable)
}

// Reset forgets every placed replica: a new lead adopts them again.
func (d *Dispatcher) Reset() {
	d.mu.Lock()
	defer d.mu.Unlock()
	clear(d.at)
}

// SetLive makes nodes the live set. Calls in flight to a node that left it
// end, and its replicas are forgotten; it returns the names of those
// nodes.
func (d *Dispatcher) SetLive(nodes []cluster.Node) []string {
	d.mu.Lock()
	defer d.mu.Unlock()
	now := map[string]bool{}
	for _, cn := range nodes {
		n := infoOf(cn)
		now[n.Name] = true
		if ln := d.live[n.Name]; ln != nil {
			ln.info = n
			continue
		}
		ln := &liveNode{info: n}
		ln.ctx, ln.cancel = context.WithCancel(context.Background())
		d.live[n.Name] = ln
	}
	var gone []string
	for name, ln := range d.live {
		if !now[name] {
			ln.cancel()
			delete(d.live, name)
			gone = append(gone, name)
		}
	}
	for id, p := range d.at {
		if p.node != d.self && p.node != "" && !now[p.node] {
			delete(d.at, id)
		}
	}
	sort.Strings(gone)
	return gone
}

// IsLive reports whether node n is live (this host always is).
func (d *Dispatcher) IsLive(n string) bool {
	if n == "" || n == d.self {
		return true
	}
	d.mu.Lock()
	defer d.mu.Unlock()
	return d.live[n] != nil
}

// Draining reports whether live node n is draining.
func (d *Dispatcher) Draining(n string) bool {
	d.mu.Lock()
	defer d.mu.Unlock()
	ln := d.live[n]
	return ln != nil && ln.info.Draining
}

// FrozenBudget is node's budget for frozen replicas (0: not known).
func (d *Dispatcher) FrozenBudget(node string) int64 {
	d.mu.Lock()
	defer d.mu.Unlock()
	if ln := d.live[node]; ln != nil {
		return ln.info.FrozenMemory
	}
	return 0
}

// Host is the host of live node n's --advertise address, where it
// publishes its stateful replicas' peer ports ("": not live, or none).
func (d *Dispatcher) Host(n string) string {
	d.mu.Lock()
	defer d.mu.Unlock()
	if ln := d.live[n]; ln != nil {
		return ln.info.Host
	}
	return ""
}

// Where returns the node replica id was placed on, or "" when it is not
// known.
func (d *Dispatcher) Where(id string) string {
	d.mu.Lock()
	defer d.mu.Unlock()
	if p := d.at[id]; p != nil {
		return p.node
	}
	return ""
}

// ask is what a replica of cfg asks of its node.
func ask(cfg manifest.Config) placement.Ask {
	return placement.Ask{CPU: cfg.Resources.CPU, Memory: cfg.Resources.MemoryBytes()}
}

// place picks the node for replica s and counts it there. d.mu is held.
func (d *Dispatcher) place(s node.ReplicaSpec) (string, error) {
	counts := map[string]map[string]int{}
	used := map[string]placement.Ask{}
	for _, p := range d.at {
		if p.released {
			continue
		}
		if counts[p.node] == nil {
			counts[p.node] = map[string]int{}
		}
		counts[p.node][p.app]++
		u := used[p.node]
		u.CPU += p.ask.CPU
		u.Memory += p.ask.Memory
		used[p.node] = u
	}
	var nodes []placement.Node
	for name, ln := range d.live {
		if ln.info.Draining || (!ln.mutedAt.IsZero() && d.clock.Since(ln.mutedAt) < muteFor) {
			continue
		}
		nodes = append(nodes, placement.Node{Slot: placement.Slot{Name: name, Apps: counts[name]},
			CPUs: float64(ln.info.CPUs), Memory: ln.info.Memory, Placed: used[name]})
	}
	sort.Slice(nodes, func(i, j int) bool { return nodes[i].Name < nodes[j].Name })
	pl := s.Config.Placement
	i, err := placement.PickNode(s.App, ask(s.Config), nodes, placement.Affinity{Nodes: pl.Nodes, Prefer: pl.Prefer},
		placement.Rules{Apart: pl.Apart, With: pl.With})
	if err != nil {
		return "", err
	}
	name := nodes[i].Name
	d.at[s.ID] = &placed{node: name, app: s.App, ask: ask(s.Config)}
	return name, nil
}

// to returns the Node replica id is on and ctx bounded by that node's
// liveness; an error when the node is not live. done is told the call's
// error: a node that did not answer (errdefs.ErrUnavailable) takes no new
// replica until it answers again.
func (d *Dispatcher) to(ctx context.Context, id string) (node.Node, context.Context, func(error), error) {
	d.mu.Lock()
	defer d.mu.Unlock()
	p := d.at[id]
	if p == nil || p.node == d.self || p.node == "" {
		return d.local, ctx, func(error) {}, nil
	}
	ln := d.live[p.node]
	if ln == nil {
		return nil, nil, nil, fmt.Errorf("replica %s: %w", id, errNodeDown(p.node))
	}
	ctx, cancel := context.WithCancel(ctx)
	stop := context.AfterFunc(ln.ctx, cancel)
	name := p.node
	return d.remote(name), ctx, func(err error) {
		stop()
		cancel()
		d.answered(name, err)
	}, nil
}

// answered notes whether node answered a call (err is its error).
func (d *Dispatcher) answered(name string, err error) {
	mute := errors.Is(err, errdefs.ErrUnavailable)
	d.mu.Lock()
	defer d.mu.Unlock()
	ln := d.live[name]
	switch {
	case ln == nil:
	case mute:
		if ln.mutedAt.IsZero() {
			d.log.Warn("dispatch: a node does not answer; no new replica goes there for a while", "node", name, "err", err)
		}
		ln.mutedAt = d.clock.Now()
	default:
		ln.mutedAt = time.Time{}
	}
}
