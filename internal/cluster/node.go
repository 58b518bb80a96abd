// Package cluster is what makes several shoal daemons on one etcd store a
// cluster: node membership (a record per node with its address and capacity,
// and a heartbeat key on the node's lease that etcd deletes when the node stops
// renewing it), the live node set, and the election of one leader whose writes
// are fenced by its election key.
//
// A node is ready while its heartbeat key exists, draining once marked so
// (it keeps its heartbeat but takes no new work), and down when its lease has
// expired. A removed node has no record at all.
package cluster

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"sort"
	"time"

	"github.com/shoal-run/shoal/internal/errdefs"
	"github.com/shoal-run/shoal/internal/store"
)

// States of a node.
const (
	StateReady    = "ready"
	StateDraining = "draining"
	StateDown     = "down"
)

// Record is a node's stored record: it outlives the node's lease, so a node
// that died is still listed (as down) until it is removed.
type Record struct {
	Name string `json:"name"`
	// Addr is where other nodes reach this one (--advertise); may be empty.
	Addr string `json:"addr,omitempty"`
	// ProxyAddr is where other nodes' proxies reach this node's proxy
	// (--advertise-proxy); may be empty.
	ProxyAddr    string    `json:"proxy_addr,omitempty"`
	CPUs         int       `json:"cpus"`
	Memory       int64     `json:"memory"`        // bytes of RAM
	FrozenMemory int64     `json:"frozen_memory"` // bytes frozen replicas may hold
	Draining     bool      `json:"draining,omitempty"`
	Joined       time.Time `json:"joined"` // when the node first joined

	// JobSlots is how many jobs the node runs at once.
	JobSlots int `json:"job_slots,omitempty"`
}

// Beat is the value of a node's heartbeat key.
type Beat struct {
	Health  string    `json:"health"` // "ok" or what is wrong
	Started time.Time `json:"started"`
}

// Node is a node as listed: its record, its state and whether it leads.
type Node struct {
	Record
	State  string `json:"state"`
	Health string `json:"health,omitempty"`
	Leader bool   `json:"leader"`
}

// Join writes rec as the node's record. A node that joins again keeps its
// draining mark and the time it first joined.
func Join(ctx context.Context, st store.Store, rec Record) error {
	key := store.NodeKey(rec.Name)
	for {
		var rev int64
		kv, err := st.Get(ctx, key)
		switch {
		case err == nil:
			var old Record
			if err := json.Unmarshal(kv.Value, &old); err == nil {
				rec.Draining = old.Draining
				if !old.Joined.IsZero() {
					rec.Joined = old.Joined
				}
			}
			rev = kv.ModRev
		case !errdefs.IsNotFound(err):
			return fmt.Errorf("node %q: %w", rec.Name, err)
		}
		b, _ := json.Marshal(rec)
		_, err = st.CompareAndSwap(ctx, key, rev, b)
		if errdefs.IsConflict(err) {
			continue // changed under us: read it again
		}
		if err != nil {
			return fmt.Errorf("node %q: %w", rec.Name, err)
		}
		return nil
	}
}

// List returns every node with a record, sorted by name, with its state and
// the current leader marked.
func List(ctx context.Context, st store.Store) ([]Node, error) {
	recs, err := st.List(ctx, store.NodesPrefix)
	if err != nil {
		return nil, fmt.Errorf("nodes: %w", err)
	}
	alive, err := st.List(ctx, store.AlivePrefix)
	if err != nil {
		return nil, fmt.Errorf("node heartbeats: %w", err)
	}
	beats := map[string]Beat{}
	for _, kv := range alive {
		var b Beat
		json.Unmarshal(kv.Value, &b)
		beats[kv.Key[len(store.AlivePrefix):]] = b
	}
	leader, err := Leader(ctx, st)
	if err != nil {
		return nil, err
	}
	out := make([]Node, 0, len(recs))
	for _, kv := range recs {
		var n Node
		if err := json.Unmarshal(kv.Value, &n.Record); err != nil {
			return nil, fmt.Errorf("node record %q: %w", kv.Key, err)
		}
		b, ok := beats[n.Name]
		switch {
		case !ok:
			n.State = StateDown
		case n.Draining:
			n.State = StateDraining
		default:
			n.State = StateReady
		}
		n.Health = b.Health
		n.Leader = ok && n.Name == leader
		out = append(out, n)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Name < out[j].Name })
	return out, nil
}

// Get returns one node as List shows it.
func Get(ctx context.Context, st store.Store, name string) (Node, error) {
	nodes, err := List(ctx, st)
	if err != nil {
		return Node{}, err
	}
	for _, n := range nodes {
		if n.Name == name {
			return n, nil
		}
	}
	return Node{}, fmt.Errorf("node %q: %w", name, errdefs.ErrNotFound)
}

// Drain marks the node draining: it stays a member but takes no new work.
func Drain(ctx context.Context, st store.Store, name string) error {
	key := store.NodeKey(name)
	for {
		kv, err := st.Get(ctx, key)
		if err != nil {
			return fmt.Errorf("node %q: %w", name, err)
		}
		var rec Record
		if err := json.Unmarshal(kv.Value, &rec); err != nil {
			return fmt.Errorf("node %q: bad record: %w", name, err)
		}
		if rec.Draining {
			return nil
		}
		rec.Draining = true
		b, _ := json.Marshal(rec)
		if _, err := st.CompareAndSwap(ctx, key, kv.ModRev, b); !errdefs.IsConflict(err) {
			if err != nil {
				return fmt.Errorf("node %q: %w", name, err)
			}
			return nil
		}
	}
}

// ErrLive is matched by the error of removing a node that is ready: drain
// it first or let it go down.
var ErrLive = errors.New("node is ready")

type liveError struct{ name string }

func (e liveError) Error() string {
	return fmt.Sprintf("node %q is ready: drain it first (shoal node drain %s) or stop it", e.name, e.name)
}

func (e liveError) Is(target error) bool { return target == ErrLive || target == errdefs.ErrConflict }

// Remove deletes the record of a node that is draining or down; a ready
// node is refused with an error that wraps ErrLive and errdefs.ErrConflict.
func Remove(ctx context.Context, st store.Store, name string) error {
	n, err := Get(ctx, st, name)
	if err != nil {
		return err
	}
	if n.State == StateReady {
		return liveError{name}
	}
	if err := st.Delete(ctx, store.NodeKey(name)); err != nil {
		return fmt.Errorf("node %q: %w", name, err)
	}
	return nil
}

// Leader returns the name of the elected leader, or "" when there is none.
// The leader is the candidate whose election key was created first.
func Leader(ctx context.Context, st store.Store) (string, error) {
	kvs, err := st.List(ctx, store.LeaderPrefix)
	if err != nil {
		return "", fmt.Errorf("leader: %w", err)
	}
	var first *store.KV
	for i := range kvs {
		if first == nil || kvs[i].CreateRev < first.CreateRev {
			first = &kvs[i]
		}
	}
	if first == nil {
		return "", nil
	}
	return string(first.Value), nil
}
