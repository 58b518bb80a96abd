// Package store is shoal's state store: one small interface with a bbolt
// implementation for one host and an etcd v3 implementation for clusters.
// Everything that matters (apps, revisions, replicas, containers, jobs, nodes,
// events) lives here, so a restarted daemon or another node can take over.
//
// Keys are slash-separated paths under a versioned root; see keys.go for the
// layout tree and the schema version.
package store

import (
	"context"
	"time"
)

// KV is one key with its value and revisions. Revisions are store-wide and
// strictly increasing: CreateRev is the revision that created the key, ModRev
// the one that last changed it.
type KV struct {
	Key       string
	Value     []byte
	CreateRev int64
	ModRev    int64
	Lease     LeaseID
}

// EventType says what happened to a key.
type EventType int

// Event types.
const (
	EventPut EventType = iota + 1
	EventDelete
)

func (t EventType) String() string {
	switch t {
	case EventPut:
		return "put"
	case EventDelete:
		return "delete"
	}
	return "unknown"
}

// Event is a change seen by a Watch. For a delete, KV.Value is empty and
// KV.ModRev is the revision of the delete.
type Event struct {
	Type EventType
	KV   KV
}

// LeaseID names a lease; 0 means no lease.
type LeaseID int64

// PutOption changes how Put writes.
type PutOption func(*PutOptions)

// PutOptions are the options a Put was given.
type PutOptions struct {
	Lease LeaseID
}

// WithLease attaches the key to a lease: it is deleted when the lease expires
// or is revoked.
func WithLease(id LeaseID) PutOption { return func(o *PutOptions) { o.Lease = id } }

// Store is the state store. Implementations are safe for concurrent use.
//
// Get and Delete return errdefs.ErrNotFound (wrapped) for a missing key.
// CompareAndSwap writes value only if the key's ModRev equals rev (rev 0 means
// "the key must not exist") and returns errdefs.ErrConflict otherwise.
// Watch streams every change under prefix that happens after the call returns,
// in revision order, until ctx ends; the channel is then closed. The channel
// may also close early (the store closed, a watcher fell too far behind, an
// etcd watch was compacted or lost its leader): the caller then Lists the
// prefix again and starts a new Watch.
// A lease expires ttl after its last KeepAlive; its keys are then deleted.
// Put with, KeepAlive of and Revoke of an unknown or expired lease return
// errdefs.ErrNotFound. An empty key is errdefs.ErrInvalid; a store that cannot
// serve a request returns errdefs.ErrUnavailable.
type Store interface {
	Get(ctx context.Context, key string) (KV, error)
	Put(ctx context.Context, key string, value []byte, opts ...PutOption) (int64, error)
	Delete(ctx context.Context, key string) error
	List(ctx context.Context, prefix string) ([]KV, error)
	Watch(ctx context.Context, prefix string) (<-chan Event, error)
	CompareAndSwap(ctx context.Context, key string, rev int64, value []byte, opts ...PutOption) (int64, error)
	Grant(ctx context.Context, ttl time.Duration) (LeaseID, error)
	KeepAlive(ctx context.Context, id LeaseID) error
	Revoke(ctx context.Context, id LeaseID) error
	Close() error
}
