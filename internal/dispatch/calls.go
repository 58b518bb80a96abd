package dispatch

import (
	"context"
	"errors"
	"fmt"
	"path/filepath"
	"time"

	"github.com/shoal-run/shoal/internal/clock"
	"github.com/shoal-run/shoal/internal/errdefs"
	"github.com/shoal-run/shoal/internal/manifest"
	"github.com/shoal-run/shoal/internal/node"
	"github.com/shoal-run/shoal/internal/placement"
)

// Start places the replica and starts it on its node.
func (d *Dispatcher) Start(ctx context.Context, s node.ReplicaSpec) (node.Started, error) {
	d.mu.Lock()
	name, err := d.place(s)
	d.mu.Unlock()
	if err != nil {
		return node.Started{}, fmt.Errorf("replica %s: %w", s.ID, err)
	}
	if s.ImageFrom == "" {
		s.ImageFrom = d.self // the leader took the deploy, and has the image
	}
	if name != d.self {
		s = relocate(s, d.dir)
	}
	n, ctx, done, err := d.to(ctx, s.ID)
	if err != nil {
		return node.Started{Node: name}, err
	}
	st, err := n.Start(ctx, s)
	done(err)
	st.Node = name
	if err != nil {
		return st, fmt.Errorf("on node %s: %w", name, err)
	}
	return st, nil
}

func (d *Dispatcher) Freeze(ctx context.Context, id string) (int64, error) {
	var mem int64
	err := d.call(ctx, id, callLimit, func(ctx context.Context, n node.Node) (err error) {
		mem, err = n.Freeze(ctx, id)
		return err
	})
	return mem, err
}

func (d *Dispatcher) Thaw(ctx context.Context, id string) error {
	return d.call(ctx, id, callLimit, func(ctx context.Context, n node.Node) error { return n.Thaw(ctx, id) })
}

func (d *Dispatcher) Drain(ctx context.Context, id string, grace time.Duration) error {
	n, ctx, done, err := d.to(ctx, id)
	if err != nil {
		return err
	}
	err = n.Drain(ctx, id, grace)
	done(err)
	return err
}

func (d *Dispatcher) Stop(ctx context.Context, id string, grace time.Duration) error {
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
func (d *Dispatcher) Wait(ctx context.Context, id string) (node.ExitStatus, error) {
	for {
		name := d.Where(id)
		n, nctx, done, err := d.to(ctx, id)
		if err != nil {
			return node.ExitStatus{}, err
		}
		st, err := n.Wait(nctx, id)
		lost := nctx.Err() != nil && ctx.Err() == nil // the node left the live set
		done(err)
		if lost {
			return st, fmt.Errorf("replica %s: %w", id, errNodeDown(name))
		}
		if err == nil || n == d.local || ctx.Err() != nil || errdefs.IsNotFound(err) || !transient(err) {
			return st, err
		}
		d.log.Debug("dispatch: wait on a remote replica cut off; waiting again", "replica", id, "err", err)
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

// Check checks the replica on its node. A check cut off because the node
// left the live set is the node's loss (errdefs.ErrUnavailable), which the
// health loop takes for a lost node, not for a failed replica.
func (d *Dispatcher) Check(ctx context.Context, id, addr string, h manifest.Health) error {
	name := d.Where(id)
	n, nctx, done, err := d.to(ctx, id)
	if err != nil {
		return err
	}
	err = n.Check(nctx, id, addr, h)
	lost := err != nil && nctx.Err() != nil && ctx.Err() == nil
	done(err)
	if lost {
		return fmt.Errorf("replica %s: %w", id, errNodeDown(name))
	}
	return err
}

// Usage reads the replica's CPU counters. The scaler reads usage on each
// tick while it decides: a slow node must not hold up the app's other
// replicas, so a remote read is bounded by usageLimit.
func (d *Dispatcher) Usage(ctx context.Context, id string) (node.CPUUse, error) {
	var u node.CPUUse
	err := d.call(ctx, id, usageLimit, func(ctx context.Context, n node.Node) (err error) {
		u, err = n.Usage(ctx, id)
		return err
	})
	return u, err
}

func (d *Dispatcher) SetCPU(ctx context.Context, id string, cpus float64) error {
	return d.call(ctx, id, callLimit, func(ctx context.Context, n node.Node) error { return n.SetCPU(ctx, id, cpus) })
}

// Remove removes the replica on its node and forgets it; a removal that
// fails keeps it placed, so that a removal made again reaches its node.
// On a node that is not live nothing is called: the node removes the container itself when
// it comes back and finds no record of it.
//
// For a replica on another node, once its container is gone, its state
// area is fetched into this host's live area of it (see fetchState): an
// error then keeps the state live here, unmerged, as for a container not
// removed.
func (d *Dispatcher) Remove(ctx context.Context, id string) error {
	d.mu.Lock()
	var app string
	if p := d.at[id]; p != nil {
		app = p.app
	}
	d.mu.Unlock()
	n, ctx, done, err := d.to(ctx, id)
	if err != nil {
		d.forget(id) // its node is lost: it removes the replica itself when back
		return nil
	}
	err = n.Remove(ctx, id)
	if err == nil && n != d.local && app != "" {
		err = d.fetchState(ctx, n, app, id)
	}
	done(err)
	if err == nil {
		// A removal that failed keeps the replica placed, for the
		// removal to be made again on its node.
		d.forget(id)
	}
	return err
}

func (d *Dispatcher) forget(id string) {
	d.mu.Lock()
	defer d.mu.Unlock()
	delete(d.at, id)
}

// Adopt asks the node the record names: a replica on a node that is not
// live does not run (it is lost, and replaced).
func (d *Dispatcher) Adopt(ctx context.Context, k node.Known) (node.Adopted, error) {
	name := k.Node
	if name == "" {
		name = d.self
	}
	d.mu.Lock()
	d.at[k.ID] = &placed{node: name, app: k.App, ask: placement.Ask{CPU: k.CPU, Memory: k.Memory}}
	d.mu.Unlock()
	if !d.IsLive(name) {
		return node.Adopted{}, nil
	}
	var a node.Adopted
	err := d.call(ctx, k.ID, callLimit, func(ctx context.Context, n node.Node) (err error) {
		a, err = n.Adopt(ctx, k)
		return err
	})
	return a, err
}

// Release frees the replica's place, in the dispatcher's count and on its
// node (nothing is called on a node that is not live).
func (d *Dispatcher) Release(ctx context.Context, id string) error {
	d.mu.Lock()
	if p := d.at[id]; p != nil {
		p.released = true
	}
	d.mu.Unlock()
	if !d.IsLive(d.Where(id)) {
		return nil
	}
	return d.call(ctx, id, callLimit, func(ctx context.Context, n node.Node) error { return n.Release(ctx, id) })
}

// relocate makes the paths of spec s under dir (this node's apps folder:
// the replica's log, the app's volumes, its state area) relative to it, for
// another node, which keeps them under its own apps folder.
func relocate(s node.ReplicaSpec, dir string) node.ReplicaSpec {
	rel := func(p string) string {
		if r, err := filepath.Rel(dir, p); err == nil && filepath.IsLocal(r) {
			return r
		}
		return p
	}
	s.Log = rel(s.Log)
	mounts := make([]node.Mount, len(s.Mounts))
	for i, mt := range s.Mounts {
		mt.Source = rel(mt.Source)
		mounts[i] = mt
	}
	s.Mounts = mounts
	return s
}

// usageLimit bounds a remote replica's usage read; callLimit the other
// short calls on another node (freeze, thaw, CPU, adopt, release).
const (
	usageLimit = 2 * time.Second
	callLimit  = 30 * time.Second
)

// call makes f on the node replica id is on: on this host with ctx, on
// another node with ctx bounded by limit and by the node's liveness. A
// call cut short because the node left the live set is the node's loss
// (not live); one that reached limit is a node that does not answer
// (errdefs.ErrUnavailable, naming it).
func (d *Dispatcher) call(ctx context.Context, id string, limit time.Duration, f func(context.Context, node.Node) error) error {
	name := d.Where(id)
	n, nctx, done, err := d.to(ctx, id)
	if err != nil {
		return err
	}
	if n == d.local {
		return f(ctx, n)
	}
	lctx, cancel := context.WithTimeout(nctx, limit)
	defer cancel()
	err = f(lctx, n)
	switch {
	case err == nil || ctx.Err() != nil:
	case nctx.Err() != nil:
		err = fmt.Errorf("replica %s: %w", id, errNodeDown(name))
	case errors.Is(lctx.Err(), context.DeadlineExceeded):
		err = fmt.Errorf("replica %s on node %s: no answer: %w", id, name, errdefs.ErrUnavailable)
	}
	done(err)
	return err
}

// sleep waits for d on clock c, or until ctx ends.
func sleep(ctx context.Context, c clock.Clock, d time.Duration) {
	t := c.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C():
	case <-ctx.Done():
	}
}
