package serving

import (
	"context"
	"errors"
	"fmt"
	"path/filepath"
	"time"

	"github.com/shoal-run/shoal/internal/errdefs"
	"github.com/shoal-run/shoal/internal/manifest"
	"github.com/shoal-run/shoal/internal/placement"
	"github.com/shoal-run/shoal/internal/runtime"
)

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

// Check checks the replica on its node. A check cut off because the node
// left the live set is the node's loss (errdefs.ErrUnavailable), which the
// health loop takes for a lost node, not for a failed replica.
func (d *dispatcher) Check(ctx context.Context, id, addr string, h manifest.Health) error {
	node := d.where(id)
	n, nctx, done, err := d.to(ctx, id)
	if err != nil {
		return err
	}
	err = n.Check(nctx, id, addr, h)
	lost := err != nil && nctx.Err() != nil && ctx.Err() == nil
	done(err)
	if lost {
		return fmt.Errorf("replica %s: %w", id, errNodeDown(node))
	}
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
//
// For a replica on another node, once its container is gone, its state
// area is fetched into this host's live area of it (see fetchState): an
// error then keeps the state live here, unmerged, as for a container not
// removed.
func (d *dispatcher) Remove(ctx context.Context, id string) error {
	defer d.forget(id)
	d.mu.Lock()
	var app string
	if p := d.at[id]; p != nil {
		app = p.app
	}
	d.mu.Unlock()
	n, ctx, done, err := d.to(ctx, id)
	if err != nil {
		return nil
	}
	err = n.Remove(ctx, id)
	if err == nil && n != d.local && app != "" {
		err = d.fetchState(ctx, n, app, id)
	}
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
