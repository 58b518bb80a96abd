package serving

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"path/filepath"
	"sort"
	"sync"
	"time"

	"github.com/shoal-run/shoal/internal/clock"
	"github.com/shoal-run/shoal/internal/errdefs"
	"github.com/shoal-run/shoal/internal/manifest"
	"github.com/shoal-run/shoal/internal/placement"
	"github.com/shoal-run/shoal/internal/runtime"
)

// dispatcher is the nodes of a cluster as one Node, the leader's: Start
// places a replica on a live node that takes new work (placement.PickNode:
// fit, [placement], spread, rules, load), and every other call goes to the
// node the replica is on: this host's straight to its localNode, another's
// to that node's remote Node. Nothing is called on a node that is not live:
// such calls fail at once (Remove and Release only forget), and calls in
// flight to a node that leaves the live set are cut short.
type dispatcher struct {
	self   string
	local  Node
	remote func(node string) Node
	dir    string // this node's apps folder
	clock  clock.Clock
	log    *slog.Logger

	mu   sync.Mutex
	at   map[string]*placed   // replica id → where it runs and what it asks
	live map[string]*liveNode // by name
}

var _ Node = (*dispatcher)(nil)

// placed is a replica as the dispatcher knows it.
type placed struct {
	node, app string
	ask       placement.Ask
	released  bool // its place is free for a replacement
}

// liveNode is a live node; ctx ends when it leaves the live set.
type liveNode struct {
	info   NodeInfo
	ctx    context.Context
	cancel context.CancelFunc
	// mutedAt is when a call to it was last not answered; zero once one
	// is. A muted node takes no new replica for muteFor.
	mutedAt time.Time
}

// muteFor is how long a node that did not answer a call takes no new
// replica, unless it answers one before.
const muteFor = 10 * time.Second

func newDispatcher(self, dir string, local Node, remote func(string) Node, c clock.Clock, log *slog.Logger) *dispatcher {
	return &dispatcher{self: self, dir: dir, local: local, remote: remote, clock: c, log: log,
		at: map[string]*placed{}, live: map[string]*liveNode{}}
}

// errNodeDown is the error of a call for a replica on node n, which is not
// live.
func errNodeDown(n string) error {
	return fmt.Errorf("node %s is not live: %w", n, errdefs.ErrUnavailable)
}

// reset forgets every placed replica: a new lead adopts them again.
func (d *dispatcher) reset() {
	d.mu.Lock()
	defer d.mu.Unlock()
	clear(d.at)
}

// setLive makes nodes the live set. Calls in flight to a node that left it
// end, and its replicas are forgotten; it returns the names of those
// nodes.
func (d *dispatcher) setLive(nodes []NodeInfo) []string {
	d.mu.Lock()
	defer d.mu.Unlock()
	now := map[string]bool{}
	for _, n := range nodes {
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

// isLive reports whether node n is live (this host always is).
func (d *dispatcher) isLive(n string) bool {
	if n == "" || n == d.self {
		return true
	}
	d.mu.Lock()
	defer d.mu.Unlock()
	return d.live[n] != nil
}

// draining reports whether live node n is draining.
func (d *dispatcher) draining(n string) bool {
	d.mu.Lock()
	defer d.mu.Unlock()
	ln := d.live[n]
	return ln != nil && ln.info.Draining
}

// frozenBudget is node's budget for frozen replicas (0: not known).
func (d *dispatcher) frozenBudget(node string) int64 {
	d.mu.Lock()
	defer d.mu.Unlock()
	if ln := d.live[node]; ln != nil {
		return ln.info.FrozenMemory
	}
	return 0
}

// where returns the node replica id is on, or "" when it is not known.
func (d *dispatcher) where(id string) string {
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
func (d *dispatcher) place(s ReplicaSpec) (string, error) {
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
func (d *dispatcher) to(ctx context.Context, id string) (Node, context.Context, func(error), error) {
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
func (d *dispatcher) answered(node string, err error) {
	mute := errors.Is(err, errdefs.ErrUnavailable)
	d.mu.Lock()
	defer d.mu.Unlock()
	ln := d.live[node]
	switch {
	case ln == nil:
	case mute:
		if ln.mutedAt.IsZero() {
			d.log.Warn("serving: a node does not answer; no new replica goes there for a while", "node", node, "err", err)
		}
		ln.mutedAt = d.clock.Now()
	default:
		ln.mutedAt = time.Time{}
	}
}

// Start places the replica and starts it on its node.
func (d *dispatcher) Start(ctx context.Context, s ReplicaSpec) (Started, error) {
	d.mu.Lock()
	name, err := d.place(s)
	d.mu.Unlock()
	if err != nil {
		return Started{}, fmt.Errorf("replica %s: %w", s.ID, err)
	}
	if s.ImageFrom == "" {
		s.ImageFrom = d.self // the leader took the deploy, and has the image
	}
	if name != d.self {
		s = relocate(s, d.dir)
	}
	n, ctx, done, err := d.to(ctx, s.ID)
	if err != nil {
		return Started{Node: name}, err
	}
	st, err := n.Start(ctx, s)
	done(err)
	st.Node = name
	if err != nil {
		return st, fmt.Errorf("on node %s: %w", name, err)
	}
	return st, nil
}

func (d *dispatcher) Freeze(id string) (int64, error) {
	n, ctx, done, err := d.to(context.Background(), id)
	if err != nil {
		return 0, err
	}
	var mem int64
	if n == d.local {
		mem, err = n.Freeze(id)
	} else {
		mem, err = bounded(ctx, d.nodeOf(id), id, func() (int64, error) { return n.Freeze(id) })
	}
	done(err)
	return mem, err
}

func (d *dispatcher) Thaw(id string) error {
	n, ctx, done, err := d.to(context.Background(), id)
	if err != nil {
		return err
	}
	if n == d.local {
		err = n.Thaw(id)
	} else {
		_, err = bounded(ctx, d.nodeOf(id), id, func() (struct{}, error) { return struct{}{}, n.Thaw(id) })
	}
	done(err)
	return err
}

func (d *dispatcher) Drain(ctx context.Context, id string, grace time.Duration) error {
	n, ctx, done, err := d.to(ctx, id)
	if err != nil {
		return err
	}
	err = n.Drain(ctx, id, grace)
	done(err)
	return err
}

func (d *dispatcher) Stop(ctx context.Context, id string, grace time.Duration) error {
	n, ctx, done, err := d.to(ctx, id)
	if err != nil {
		return err
	}
	err = n.Stop(ctx, id, grace)
	done(err)
	return err
}

// Wait waits on the replica's node. A remote wait cut off while the node
// stays live (its daemon restarted, a blip of the network) is made again:
// the replica may well run on; only its node's answer, or the node's loss,
// ends the wait.
func (d *dispatcher) Wait(ctx context.Context, id string) (runtime.ExitStatus, error) {
	for {
		node := d.where(id)
		n, nctx, done, err := d.to(ctx, id)
		if err != nil {
			return runtime.ExitStatus{}, err
		}
		st, err := n.Wait(nctx, id)
		lost := nctx.Err() != nil && ctx.Err() == nil // the node left the live set
		done(err)
		if lost {
			return st, fmt.Errorf("replica %s: %w", id, errNodeDown(node))
		}
		if err == nil || n == d.local || ctx.Err() != nil || errdefs.IsNotFound(err) || !transient(err) {
			return st, err
		}
		d.log.Debug("serving: wait on a remote replica cut off; waiting again", "replica", id, "err", err)
		sleep(ctx, d.clock, waitAgain)
	}
}

// waitAgain is how long a remote wait that was cut off waits before it is
// made again.
const waitAgain = time.Second

// transient reports whether err is the transport's rather than the node's
// answer: the node could not be reached, or did not answer in time.
func transient(err error) bool {
	return !errdefs.IsInvalid(err) && !errdefs.IsConflict(err)
}

func (d *dispatcher) Check(ctx context.Context, id, addr string, h manifest.Health) error {
	n, ctx, done, err := d.to(ctx, id)
	if err != nil {
		return err
	}
	err = n.Check(ctx, id, addr, h)
	done(err)
	return err
}

func (d *dispatcher) Usage(id string) (uint64, uint64, error) {
	n, ctx, done, err := d.to(context.Background(), id)
	if err != nil {
		return 0, 0, err
	}
	if n == d.local {
		return n.Usage(id)
	}
	// The scaler reads usage on each tick while it decides: a slow node
	// must not hold up the app's other replicas.
	ctx, cancel := context.WithTimeout(ctx, usageLimit)
	defer cancel()
	u, err := bounded(ctx, d.nodeOf(id), id, func() ([2]uint64, error) {
		p, t, err := n.Usage(id)
		return [2]uint64{p, t}, err
	})
	done(err)
	return u[0], u[1], err
}

func (d *dispatcher) SetCPU(id string, cpus float64) error {
	n, ctx, done, err := d.to(context.Background(), id)
	if err != nil {
		return err
	}
	if n == d.local {
		err = n.SetCPU(id, cpus)
	} else {
		_, err = bounded(ctx, d.nodeOf(id), id, func() (struct{}, error) { return struct{}{}, n.SetCPU(id, cpus) })
	}
	done(err)
	return err
}

// Remove removes the replica on its node and forgets it. On a node that is
// not live nothing is called: the node removes the container itself when
// it comes back and finds no record of it.
func (d *dispatcher) Remove(ctx context.Context, id string) error {
	defer d.forget(id)
	n, ctx, done, err := d.to(ctx, id)
	if err != nil {
		return nil
	}
	err = n.Remove(ctx, id)
	done(err)
	return err
}

func (d *dispatcher) forget(id string) {
	d.mu.Lock()
	defer d.mu.Unlock()
	delete(d.at, id)
}

// Adopt asks the node the record names: a replica on a node that is not
// live does not run (it is lost, and replaced).
func (d *dispatcher) Adopt(k Known) Adopted {
	node := k.Node
	if node == "" {
		node = d.self
	}
	d.mu.Lock()
	d.at[k.ID] = &placed{node: node, app: k.App, ask: placement.Ask{CPU: k.CPU, Memory: k.Memory}}
	d.mu.Unlock()
	n, ctx, done, err := d.to(context.Background(), k.ID)
	if err != nil {
		return Adopted{}
	}
	defer done(nil)
	if n == d.local {
		return n.Adopt(k)
	}
	a, _ := bounded(ctx, node, k.ID, func() (Adopted, error) { return n.Adopt(k), nil })
	return a
}

// Release frees the replica's place, in the dispatcher's count and on its
// node.
func (d *dispatcher) Release(id string) {
	d.mu.Lock()
	if p := d.at[id]; p != nil {
		p.released = true
	}
	d.mu.Unlock()
	n, ctx, done, err := d.to(context.Background(), id)
	if err != nil {
		return
	}
	defer done(nil)
	if n == d.local {
		n.Release(id)
		return
	}
	bounded(ctx, d.nodeOf(id), id, func() (struct{}, error) { n.Release(id); return struct{}{}, nil })
}

// relocate makes the paths of spec s under dir (this node's apps folder:
// the replica's log, the app's volumes, its state area) relative to it, for
// another node, which keeps them under its own apps folder.
func relocate(s ReplicaSpec, dir string) ReplicaSpec {
	rel := func(p string) string {
		if r, err := filepath.Rel(dir, p); err == nil && filepath.IsLocal(r) {
			return r
		}
		return p
	}
	s.Log = rel(s.Log)
	mounts := make([]runtime.Mount, len(s.Mounts))
	for i, mt := range s.Mounts {
		mt.Source = rel(mt.Source)
		mounts[i] = mt
	}
	s.Mounts = mounts
	return s
}

// usageLimit bounds a remote replica's usage read.
const usageLimit = 2 * time.Second

// nodeOf is the node replica id was placed on.
func (d *dispatcher) nodeOf(id string) string {
	d.mu.Lock()
	defer d.mu.Unlock()
	if p := d.at[id]; p != nil {
		return p.node
	}
	return ""
}

// bounded makes call, a call on a remote node that takes no context (it
// ends on its own, within the transport's call timeout), and returns early
// once ctx ends: when the node leaves the live set, the controller goes on
// at once instead of waiting on a dead node's connection.
func bounded[T any](ctx context.Context, node, id string, call func() (T, error)) (T, error) {
	type result struct {
		v   T
		err error
	}
	ch := make(chan result, 1)
	go func() {
		v, err := call()
		ch <- result{v, err}
	}()
	select {
	case r := <-ch:
		return r.v, r.err
	case <-ctx.Done():
		var zero T
		if errors.Is(ctx.Err(), context.DeadlineExceeded) {
			return zero, fmt.Errorf("replica %s on node %s: no answer: %w", id, node, errdefs.ErrUnavailable)
		}
		return zero, fmt.Errorf("replica %s: %w", id, errNodeDown(node))
	}
}
