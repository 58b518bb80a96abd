package cluster

import (
	"context"
	"fmt"
	"log/slog"
	"math"
	"strings"
	"sync"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	"go.etcd.io/etcd/client/v3/concurrency"

	"github.com/shoal-run/shoal/internal/store"
)

// Elector campaigns for leadership of the cluster in etcd's election under
// store.LeaderPrefix, on a session (a lease) of its own. Whoever holds the
// oldest key under the prefix leads; a leader whose session lease expires
// (the node died or was cut off) loses its key, and the next candidate leads.
//
// Fencing: every write a leader makes goes through its Term, a transaction
// that succeeds only while the leader's own election key still exists with
// the revision it was created at. A deposed leader that wakes up and writes
// is refused by etcd itself, whatever the leader believes.
type Elector struct {
	Client *clientv3.Client
	Name   string
	TTL    time.Duration
	Log    *slog.Logger

	mu   sync.Mutex
	term *EtcdTerm
	subs []chan struct{}
}

// EtcdTerm is one leadership in etcd: the election key and the revision it
// was created at. Its writes are fenced by them.
type EtcdTerm struct {
	cli *clientv3.Client
	Key string
	Rev int64
}

// NewTerm returns the term of the leadership whose election key was created
// at rev: its writes are fenced like the leader's own.
func NewTerm(cli *clientv3.Client, key string, rev int64) *EtcdTerm {
	return &EtcdTerm{cli: cli, Key: key, Rev: rev}
}

// Put writes key only while the term lasts; after, it returns an error that
// wraps ErrDeposed.
func (t *EtcdTerm) Put(ctx context.Context, key string, value []byte) (int64, error) {
	resp, err := t.cli.Txn(ctx).
		If(clientv3.Compare(clientv3.CreateRevision(t.Key), "=", t.Rev)).
		Then(clientv3.OpPut(key, string(value))).
		Commit()
	if err != nil {
		return 0, fmt.Errorf("key %q: %w", key, err)
	}
	if !resp.Succeeded {
		return 0, fmt.Errorf("key %q: leadership %s@%d: %w", key, t.Key, t.Rev, ErrDeposed)
	}
	return resp.Header.Revision, nil
}

// Delete removes key only while the term lasts (a key already gone is no
// error); after, it returns an error that wraps ErrDeposed.
func (t *EtcdTerm) Delete(ctx context.Context, key string) error {
	resp, err := t.cli.Txn(ctx).
		If(clientv3.Compare(clientv3.CreateRevision(t.Key), "=", t.Rev)).
		Then(clientv3.OpDelete(key)).
		Commit()
	if err != nil {
		return fmt.Errorf("key %q: %w", key, err)
	}
	if !resp.Succeeded {
		return fmt.Errorf("key %q: leadership %s@%d: %w", key, t.Key, t.Rev, ErrDeposed)
	}
	return nil
}

// Changed returns a channel that gets a value after every change of
// leadership of this node: it leads, or no longer does (changes close
// together may be told once).
func (e *Elector) Changed() <-chan struct{} {
	e.mu.Lock()
	defer e.mu.Unlock()
	ch := make(chan struct{}, 1)
	e.subs = append(e.subs, ch)
	return ch
}

// setTerm makes t the current term (nil: none) and tells the subscribers.
func (e *Elector) setTerm(t *EtcdTerm) {
	e.mu.Lock()
	defer e.mu.Unlock()
	e.term = t
	for _, ch := range e.subs {
		select {
		case ch <- struct{}{}:
		default:
		}
	}
}

// Leading returns the current term while this node leads, or nil (an
// interface that is nil, never one holding a nil *EtcdTerm).
func (e *Elector) Leading() Term {
	e.mu.Lock()
	defer e.mu.Unlock()
	if e.term == nil {
		return nil
	}
	return e.term
}

// Run campaigns, leads while the session lasts, and campaigns again after a
// lost session, until ctx ends; it then resigns so another node leads at once.
func (e *Elector) Run(ctx context.Context) {
	for ctx.Err() == nil {
		if err := e.once(ctx); err != nil && ctx.Err() == nil {
			e.Log.Warn("leader election", "node", e.Name, "err", err)
			select {
			case <-ctx.Done():
			case <-time.After(time.Second):
			}
		}
	}
}

func (e *Elector) once(ctx context.Context) error {
	ttl := int(math.Ceil(e.TTL.Seconds()))
	s, err := concurrency.NewSession(e.Client, concurrency.WithTTL(ttl), concurrency.WithContext(ctx))
	if err != nil {
		return fmt.Errorf("session: %w", err)
	}
	defer s.Close()
	// The election adds the "/" between the prefix and its keys.
	el := concurrency.NewElection(s, strings.TrimSuffix(store.LeaderPrefix, "/"))
	// Campaign returns once this node leads; a lost session ends it too.
	cctx, cancel := context.WithCancel(ctx)
	go func() {
		select {
		case <-s.Done():
			cancel()
		case <-cctx.Done():
		}
	}()
	defer cancel()
	if err := el.Campaign(cctx, e.Name); err != nil {
		return fmt.Errorf("campaign: %w", err)
	}
	t := NewTerm(e.Client, el.Key(), el.Rev())
	e.setTerm(t)
	e.Log.Info("leading the cluster", "node", e.Name, "key", t.Key, "rev", t.Rev)
	defer e.setTerm(nil)
	select {
	case <-s.Done():
		e.Log.Warn("leadership lost: session expired", "node", e.Name)
		return nil
	case <-ctx.Done():
		rctx, rcancel := context.WithTimeout(context.Background(), time.Second)
		el.Resign(rctx)
		rcancel()
		return nil
	}
}
