package store

import (
	"context"
	"fmt"
	"strconv"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/shoal-run/shoal/internal/errdefs"
)

// Watch streams every change under prefix made after Watch returns, in
// revision order. The channel is closed when ctx ends, when the store is
// closed, when the cluster loses its leader, or when etcd cancels the watch
// (for instance after compaction); the caller then lists the prefix again and
// starts a new Watch.
func (e *Etcd) Watch(ctx context.Context, prefix string) (<-chan Event, error) {
	what := "prefix " + strconv.Quote(prefix)
	// The revision the store is at now: the watch starts right after it.
	resp, err := e.cli.Get(ctx, prefix, clientv3.WithPrefix(), clientv3.WithCountOnly())
	if err != nil {
		return nil, e.wrap(ctx, what, err)
	}
	wctx, cancel := context.WithCancel(clientv3.WithRequireLeader(ctx))
	wch := e.cli.Watch(wctx, prefix, clientv3.WithPrefix(), clientv3.WithRev(resp.Header.Revision+1))
	out := make(chan Event, 64)
	go func() {
		defer close(out)
		defer cancel()
		for {
			var wr clientv3.WatchResponse
			var ok bool
			select {
			case <-ctx.Done():
				return
			case wr, ok = <-wch:
			}
			if !ok {
				return
			}
			if err := wr.Err(); err != nil {
				if ctx.Err() == nil {
					e.log.Warn("store watch ended by etcd", "endpoints", e.endpoints, "prefix", prefix, "err", err)
				}
				return
			}
			for _, ev := range wr.Events {
				se := Event{Type: EventPut, KV: fromEtcd(ev.Kv)}
				if ev.Type == clientv3.EventTypeDelete {
					se = Event{Type: EventDelete, KV: KV{Key: string(ev.Kv.Key), ModRev: ev.Kv.ModRevision}}
				}
				select {
				case out <- se:
				case <-ctx.Done():
					return
				}
			}
		}
	}()
	return out, nil
}

// Grant creates a lease that ends ttl from now unless kept alive. etcd counts
// TTLs in whole seconds, so ttl is rounded up.
func (e *Etcd) Grant(ctx context.Context, ttl time.Duration) (LeaseID, error) {
	if ttl <= 0 {
		return 0, errdefs.Invalid("ttl", "must be positive, got %s", ttl)
	}
	secs := int64((ttl + time.Second - 1) / time.Second)
	resp, err := e.cli.Grant(ctx, secs)
	if err != nil {
		return 0, e.wrap(ctx, "grant lease", err)
	}
	return LeaseID(resp.ID), nil
}

// KeepAlive moves the lease's end to its TTL from now.
func (e *Etcd) KeepAlive(ctx context.Context, id LeaseID) error {
	if _, err := e.cli.KeepAliveOnce(ctx, clientv3.LeaseID(id)); err != nil {
		return e.wrap(ctx, fmt.Sprintf("lease %d", id), err)
	}
	return nil
}

// Revoke ends the lease now and deletes its keys.
func (e *Etcd) Revoke(ctx context.Context, id LeaseID) error {
	if _, err := e.cli.Revoke(ctx, clientv3.LeaseID(id)); err != nil {
		return e.wrap(ctx, fmt.Sprintf("lease %d", id), err)
	}
	return nil
}
