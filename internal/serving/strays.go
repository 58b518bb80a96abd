package serving

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"github.com/shoal-run/shoal/internal/labels"
	"github.com/shoal-run/shoal/internal/store"
)

// Container is one of this host's containers, as RemoveStrays sees it.
type Container struct {
	ID      string
	Labels  map[string]string
	Created time.Time
}

// RemoveStrays removes, among cs (this host's containers), the replicas
// that lost their place in the cluster: the record of the replica is gone,
// or names another node, because the leader replaced them while this node
// was lost (or their app went, or a leader that could not reach the node
// gave them up). A node runs it at start, whenever its heartbeat comes
// back after its key was dropped, and now and then. Containers created at or
// after before are left alone: a leader that sees the node live again may
// start replicas on it, and writes their records only once they run. It
// returns the ids removed.
func (m *Manager) RemoveStrays(ctx context.Context, cs []Container, before time.Time) ([]string, error) {
	var cands []Container
	for _, c := range cs {
		if c.Labels[labels.Kind] == labels.KindReplica && c.Created.Before(before) {
			cands = append(cands, c)
		}
	}
	if len(cands) == 0 {
		return nil, nil
	}
	// One read of every replica record: the node each names, by id.
	kvs, err := m.o.Store.List(ctx, store.ReplicasRoot)
	if err != nil {
		return nil, fmt.Errorf("serving: replicas that lost their place: %w", err)
	}
	named := make(map[string]string, len(kvs))
	for _, kv := range kvs {
		var rec replicaRecord
		if json.Unmarshal(kv.Value, &rec) == nil && rec.ID != "" {
			named[rec.ID] = rec.Node
		}
	}
	var removed []string
	var errs []error
	for _, c := range cands {
		node, ok := named[c.ID]
		if ok && node == m.o.Node {
			continue
		}
		why := "no record"
		if ok {
			why = fmt.Sprintf("its record names node %q", node)
		}
		m.log.Warn("serving: removing a replica that lost its place in the cluster", "replica", c.ID, "app", c.Labels[labels.App], "why", why)
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
