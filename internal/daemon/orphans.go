package daemon

import (
	"context"
	"os"
	"path/filepath"
	"time"

	"github.com/shoal-run/shoal/internal/labels"
	"github.com/shoal-run/shoal/internal/runtime"
	"github.com/shoal-run/shoal/internal/serving"
)

// removeUnownedReplicas removes the replica containers the runtime adopted
// that no app claims once serving has started: their replica record was
// lost (the daemon died between starting the container and writing it) or
// their app is gone. Nothing else would ever stop them or release their
// network namespace.
func (d *Daemon) removeUnownedReplicas(ctx context.Context, adopted []*runtime.Container) {
	for _, c := range adopted {
		if c.Labels[labels.Kind] != labels.KindReplica || d.apps.Owns(c.ID) {
			continue
		}
		d.log.Warn("removing a replica container no app has a record of", "container", c.ID, "pid", c.Pid)
		if err := d.rt.Delete(ctx, c.ID); err != nil {
			d.log.Error("remove replica container", "container", c.ID, "err", err)
			continue
		}
		os.RemoveAll(filepath.Join(d.secretsDir(), c.ID))
		if att, ok := d.net.Lookup(c.ID); ok {
			if err := d.net.Release(ctx, att); err != nil {
				d.log.Warn("release replica network", "container", c.ID, "err", err)
			}
		}
	}
}

// removeStrays removes, on a node of a cluster, the replica containers
// among cs created before at whose record is gone or names another node.
func (d *Daemon) removeStrays(ctx context.Context, cs []*runtime.Container, at time.Time) {
	sc := make([]serving.Container, len(cs))
	for i, c := range cs {
		sc[i] = serving.Container{ID: c.ID, Labels: c.Labels, Created: c.Created}
	}
	removed, err := d.apps.RemoveStrays(ctx, sc, at)
	if len(removed) > 0 {
		d.log.Warn("removed replicas the cluster replaced while this node was lost", "replicas", removed)
	}
	if err != nil {
		d.log.Error("remove replicas the cluster replaced", "err", err)
	}
}

// removeStraysNow lists this host's containers and removes the strays
// among them created before at.
func (d *Daemon) removeStraysNow(ctx context.Context, at time.Time) {
	cs, err := d.rt.List(ctx)
	if err != nil {
		d.log.Error("list containers for replicas the cluster replaced", "err", err)
		return
	}
	d.removeStrays(ctx, cs, at)
}

// strayEvery is how often a node of a cluster looks for replicas that lost
// their place; a replica container is left alone for as long after it was
// made (its record names its node within a moment of its start).
const strayEvery = 30 * time.Second

// sweepStrays removes, every strayEvery until ctx ends, the replica
// containers no record gives this node: one the leader gave up while it
// could not reach this node's agent would run on unrouted otherwise.
func (d *Daemon) sweepStrays(ctx context.Context) {
	t := time.NewTicker(strayEvery)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case now := <-t.C:
			d.removeStraysNow(ctx, now.Add(-strayEvery))
		}
	}
}
