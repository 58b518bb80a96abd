package cluster

import (
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"time"

	"github.com/shoal-run/shoal/internal/clock"
	"github.com/shoal-run/shoal/internal/errdefs"
	"github.com/shoal-run/shoal/internal/store"
)

// DefaultTTL is the default lease of a node: a node that stops renewing it is
// down within this time (plus the store's expiry check, half a second in etcd).
const DefaultTTL = 3 * time.Second

// Heartbeat keeps one node's heartbeat key alive on a lease.
//
// It grants a lease of TTL, writes the node's Beat under it, and renews the
// lease every TTL/3. While renewals fail it keeps trying; once the last good
// renewal is a full TTL ago the store has dropped the key (or is about to), so
// the node counts itself lost and starts over with a fresh lease as soon as
// the store answers. A lease the store no longer knows is replaced at once.
// When Run's context ends the lease is revoked, so a node that stops cleanly
// is down at once rather than after the TTL.
type Heartbeat struct {
	Store  store.Store
	Clock  clock.Clock
	Name   string
	TTL    time.Duration
	Health func() string // nil: always "ok"
	Log    *slog.Logger
	// Observe, if set, is told of every step; tests wait on it.
	Observe func(Status)
}

// Status is one step of a Heartbeat.
type Status struct {
	Lease store.LeaseID // the lease in use; 0 while there is none
	Alive bool          // the last grant or renewal succeeded
	Lost  bool          // no good renewal for a full TTL (the key may be gone), or the store no longer knows the lease
	Err   error
}

// Run keeps the heartbeat until ctx ends.
func (h *Heartbeat) Run(ctx context.Context) {
	started := h.Clock.Now()
	var lease store.LeaseID
	var lastOK time.Time
	lost := false // counted lost since the last good step
	defer func() {
		if lease != 0 {
			rctx, cancel := context.WithTimeout(context.Background(), time.Second)
			h.Store.Revoke(rctx, lease)
			cancel()
		}
	}()
	for {
		var st Status
		// A store cut off may not answer at all: a step gets a third of
		// the TTL, like the wait between steps.
		sctx, cancel := context.WithTimeout(ctx, h.TTL/3)
		if lease == 0 {
			lease, st.Err = h.register(sctx, started)
		} else {
			st.Err = h.Store.KeepAlive(sctx, lease)
			if errdefs.IsNotFound(st.Err) {
				lease, st.Lost = 0, true
			}
		}
		cancel()
		if ctx.Err() != nil {
			return
		}
		switch {
		case st.Err == nil:
			lastOK, st.Alive, lost = h.Clock.Now(), true, false
		case lease != 0 && h.Clock.Since(lastOK) >= h.TTL:
			// The store may have let the lease go by now: the node counts
			// itself lost. It keeps renewing the same lease, though: a
			// store that could not answer in time (etcd electing a new
			// leader on a loaded host) extends its leases rather than
			// dropping them, and one it did drop answers NotFound, which
			// starts over above.
			if !lost {
				h.Log.Warn("node heartbeat lost", "node", h.Name, "lease", lease, "err", st.Err)
			}
			lost, st.Lost = true, true
		default:
			h.Log.Debug("node heartbeat failed", "node", h.Name, "err", st.Err)
		}
		st.Lease = lease
		// The timer is made before the step is told, so a test that moves
		// the fake clock on being told moves this timer.
		t := h.Clock.NewTimer(h.TTL / 3)
		if h.Observe != nil {
			h.Observe(st)
		}
		select {
		case <-ctx.Done():
			t.Stop()
			return
		case <-t.C():
		}
	}
}

// register grants a fresh lease and writes the heartbeat key on it.
func (h *Heartbeat) register(ctx context.Context, started time.Time) (store.LeaseID, error) {
	id, err := h.Store.Grant(ctx, h.TTL)
	if err != nil {
		return 0, fmt.Errorf("node %q: grant lease: %w", h.Name, err)
	}
	health := "ok"
	if h.Health != nil {
		health = h.Health()
	}
	b, _ := json.Marshal(Beat{Health: health, Started: started.UTC()})
	if _, err := h.Store.Put(ctx, store.AliveKey(h.Name), b, store.WithLease(id)); err != nil {
		rctx, cancel := context.WithTimeout(context.Background(), time.Second)
		h.Store.Revoke(rctx, id)
		cancel()
		return 0, fmt.Errorf("node %q: heartbeat key: %w", h.Name, err)
	}
	return id, nil
}
