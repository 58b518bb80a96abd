package runtime

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"sync"
	"time"

	"github.com/shoal-run/shoal/internal/errdefs"
	"github.com/shoal-run/shoal/internal/store"
)

// Record is what shoal keeps about a container so that a restarted daemon can
// adopt it or clean up after it.
type Record struct {
	ID          string            `json:"id"`
	Bundle      string            `json:"bundle"`
	Pid         int               `json:"pid"`
	Created     time.Time         `json:"created"`
	Labels      map[string]string `json:"labels,omitempty"`
	NetNSPath   string            `json:"netns_path,omitempty"`
	Runtime     string            `json:"runtime"`
	CgroupsPath string            `json:"cgroups_path"`
	CPUs        float64           `json:"cpus,omitempty"`
	// StopSignal is what Stop sends first (0: SIGTERM).
	StopSignal int `json:"stop_signal,omitempty"`
	// Checkpointable: made with Spec.Checkpointable.
	Checkpointable bool `json:"checkpointable,omitempty"`
	// Ephemeral records stay in memory only (Spec.Ephemeral).
	Ephemeral bool `json:"-"`
}

// RecordStore keeps container records. Get returns an error matching
// errdefs.ErrNotFound for an unknown id; Delete of an unknown id is not an
// error.
type RecordStore interface {
	Put(ctx context.Context, r Record) error
	Get(ctx context.Context, id string) (Record, error)
	Delete(ctx context.Context, id string) error
	List(ctx context.Context) ([]Record, error)
}

// StoreRecords keeps records in a store.Store under
// store.ContainerKey(Node, id), so that runtimes of several nodes sharing one
// store (etcd) never see each other's containers.
type StoreRecords struct {
	S    store.Store
	Node string // default "local"
}

func (s StoreRecords) node() string {
	if s.Node == "" {
		return "local"
	}
	return s.Node
}

// Put writes r.
func (s StoreRecords) Put(ctx context.Context, r Record) error {
	b, err := json.Marshal(r)
	if err != nil {
		return err
	}
	if _, err := s.S.Put(ctx, store.ContainerKey(s.node(), r.ID), b); err != nil {
		return fmt.Errorf("container %q: record: %w", r.ID, err)
	}
	return nil
}

// Get reads the record of id.
func (s StoreRecords) Get(ctx context.Context, id string) (Record, error) {
	kv, err := s.S.Get(ctx, store.ContainerKey(s.node(), id))
	if err != nil {
		return Record{}, fmt.Errorf("container %q: record: %w", id, err)
	}
	var r Record
	if err := json.Unmarshal(kv.Value, &r); err != nil {
		return Record{}, fmt.Errorf("container %q: record: %w", id, err)
	}
	return r, nil
}

// Delete removes the record of id.
func (s StoreRecords) Delete(ctx context.Context, id string) error {
	err := s.S.Delete(ctx, store.ContainerKey(s.node(), id))
	if err != nil && !errdefs.IsNotFound(err) {
		return fmt.Errorf("container %q: record: %w", id, err)
	}
	return nil
}

// List returns every record. A record that does not parse is skipped with
// its key in the error, after the rest are read.
func (s StoreRecords) List(ctx context.Context) ([]Record, error) {
	kvs, err := s.S.List(ctx, store.NodeContainersPrefix(s.node()))
	if err != nil {
		return nil, fmt.Errorf("container records: %w", err)
	}
	out := make([]Record, 0, len(kvs))
	var bad []string
	for _, kv := range kvs {
		var r Record
		if err := json.Unmarshal(kv.Value, &r); err != nil || r.ID == "" {
			bad = append(bad, kv.Key)
			continue
		}
		out = append(out, r)
	}
	if len(bad) > 0 {
		return out, fmt.Errorf("container records %s: %w", strings.Join(bad, ", "), errdefs.ErrInvalid)
	}
	return out, nil
}

// MemRecords is an in-memory RecordStore, for tools and tests that need no
// persistence across processes.
type MemRecords struct {
	mu sync.Mutex
	m  map[string]Record
}

// Put writes r.
func (m *MemRecords) Put(_ context.Context, r Record) error {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.m == nil {
		m.m = map[string]Record{}
	}
	m.m[r.ID] = r
	return nil
}

// Get reads the record of id.
func (m *MemRecords) Get(_ context.Context, id string) (Record, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	r, ok := m.m[id]
	if !ok {
		return Record{}, fmt.Errorf("container %q: record: %w", id, errdefs.ErrNotFound)
	}
	return r, nil
}

// Delete removes the record of id.
func (m *MemRecords) Delete(_ context.Context, id string) error {
	m.mu.Lock()
	defer m.mu.Unlock()
	delete(m.m, id)
	return nil
}

// List returns every record.
func (m *MemRecords) List(context.Context) ([]Record, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	out := make([]Record, 0, len(m.m))
	for _, r := range m.m {
		out = append(out, r)
	}
	return out, nil
}

var (
	_ RecordStore = StoreRecords{}
	_ RecordStore = (*MemRecords)(nil)
)
