package serving

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"github.com/shoal-run/shoal/internal/errdefs"
	"github.com/shoal-run/shoal/internal/runtime"
	"github.com/shoal-run/shoal/internal/store"
)

// RemoveStrays removes, among cs (this host's containers), the replicas
// that lost their place in the cluster: the record of the replica is gone,
// or names another node, because the leader replaced them while this node
// was lost (or their app went). A node runs it at start and whenever its
// heartbeat comes back after its key was dropped. Containers created at or
// after before are left alone: a leader that sees the node live again may
// start replicas on it, and writes their records only once they run. It
// returns the ids removed.
func (m *Manager) RemoveStrays(ctx context.Context, cs []*runtime.Container, before time.Time) ([]string, error) {
	var removed []string
	var errs []error
	for _, c := range cs {
		if c.Labels[labelKind] != kindReplica || !c.Created.Before(before) {
			continue
		}
		app := c.Labels[labelApp]
		stray, why, err := m.stray(ctx, app, c.ID)
		if err != nil {
			errs = append(errs, err)
			continue
		}
		if !stray {
			continue
		}
		m.log.Warn("serving: removing a replica that lost its place in the cluster", "replica", c.ID, "app", app, "why", why)
		if err := m.local.Stop(ctx, c.ID, 0); err != nil {
			errs = append(errs, err)
			continue
		}
		if err := m.local.Remove(ctx, c.ID); err != nil {
			errs = append(errs, err)
			continue
		}
		removed = append(removed, c.ID)
	}
	if err := errors.Join(errs...); err != nil {
		return removed, fmt.Errorf("serving: replicas that lost their place: %w", err)
	}
	return removed, nil
}

// stray reports whether replica id of app has lost its place on this node,
// and why.
func (m *Manager) stray(ctx context.Context, app, id string) (bool, string, error) {
	if app == "" {
		return true, "no app label", nil
	}
	kv, err := m.o.Store.Get(ctx, store.ReplicaKey(app, id))
	if errdefs.IsNotFound(err) {
		return true, "no record", nil
	}
	if err != nil {
		return false, "", fmt.Errorf("replica %s: %w", id, err)
	}
	var rec replicaRecord
	if err := json.Unmarshal(kv.Value, &rec); err != nil {
		return true, "unreadable record", nil
	}
	if rec.Node != m.o.Node {
		return true, fmt.Sprintf("its record names node %q", rec.Node), nil
	}
	return false, "", nil
}
