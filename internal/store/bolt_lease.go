package store

import (
	"context"
	"encoding/binary"
	"fmt"
	"time"

	"github.com/shoal-run/shoal/internal/clock"
	"github.com/shoal-run/shoal/internal/errdefs"
)

// boltLease is the in-memory side of a persisted lease.
type boltLease struct {
	ttl      time.Duration
	deadline time.Time
	timer    clock.Timer
}

// Grant creates a lease that ends ttl from now unless kept alive.
func (b *Bolt) Grant(ctx context.Context, ttl time.Duration) (LeaseID, error) {
	if ttl <= 0 {
		return 0, errdefs.Invalid("ttl", "must be positive, got %s", ttl)
	}
	if err := ctx.Err(); err != nil {
		return 0, fmt.Errorf("grant lease: %w", err)
	}
	var id LeaseID
	var deadline time.Time
	b.mu.Lock()
	defer b.mu.Unlock()
	err := b.updateLocked(func(t *boltTx) error {
		var seq int64
		if raw := t.meta.Get(metaLeaseSeq); raw != nil {
			seq = int64(binary.BigEndian.Uint64(raw))
		}
		seq++
		if err := t.meta.Put(metaLeaseSeq, u64(seq)); err != nil {
			return err
		}
		id = LeaseID(seq)
		deadline = b.clock.Now().Add(ttl)
		return t.leases.Put(u64(seq), encodeLease(ttl, deadline))
	})
	if err != nil {
		return 0, fmt.Errorf("grant lease: %w", err)
	}
	b.armLocked(id, ttl, deadline)
	return id, nil
}

// KeepAlive moves the lease's end to ttl from now.
func (b *Bolt) KeepAlive(ctx context.Context, id LeaseID) error {
	if err := ctx.Err(); err != nil {
		return fmt.Errorf("lease %d: %w", id, err)
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	l, ok := b.leases[id]
	if !ok {
		if b.closed {
			return fmt.Errorf("lease %d: %w", id, errClosed)
		}
		return fmt.Errorf("lease %d: %w", id, errdefs.ErrNotFound)
	}
	deadline := b.clock.Now().Add(l.ttl)
	err := b.updateLocked(func(t *boltTx) error {
		return t.leases.Put(u64(int64(id)), encodeLease(l.ttl, deadline))
	})
	if err != nil {
		return fmt.Errorf("lease %d: %w", id, err)
	}
	l.deadline = deadline
	l.timer.Reset(l.ttl)
	return nil
}

// Revoke ends the lease now and deletes its keys.
func (b *Bolt) Revoke(ctx context.Context, id LeaseID) error {
	if err := ctx.Err(); err != nil {
		return fmt.Errorf("lease %d: %w", id, err)
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	if _, ok := b.leases[id]; !ok {
		if b.closed {
			return fmt.Errorf("lease %d: %w", id, errClosed)
		}
		return fmt.Errorf("lease %d: %w", id, errdefs.ErrNotFound)
	}
	return b.endLocked(id)
}

// expire runs when a lease's timer fires. A KeepAlive that won the race for
// the lock has already moved the deadline and re-armed the timer.
func (b *Bolt) expire(id LeaseID) {
	b.mu.Lock()
	defer b.mu.Unlock()
	l, ok := b.leases[id]
	if !ok || b.closed || b.clock.Now().Before(l.deadline) {
		return
	}
	if err := b.endLocked(id); err != nil {
		b.log.Error("lease expiry failed", "path", b.path, "lease", int64(id), "err", err)
		// Try again rather than leave the keys of a dead lease behind.
		l.timer.Reset(time.Second)
	}
}

// endLocked deletes the lease and its keys in one transaction.
func (b *Bolt) endLocked(id LeaseID) error {
	err := b.updateLocked(func(t *boltTx) error { return t.dropLease(id) })
	if err != nil {
		return fmt.Errorf("lease %d: %w", id, err)
	}
	if l, ok := b.leases[id]; ok {
		l.timer.Stop()
		delete(b.leases, id)
	}
	return nil
}

// armLocked starts the in-memory timer of a lease.
func (b *Bolt) armLocked(id LeaseID, ttl time.Duration, deadline time.Time) {
	l := &boltLease{ttl: ttl, deadline: deadline}
	l.timer = b.clock.AfterFunc(ttl, func() { b.expire(id) })
	b.leases[id] = l
}

// leaseRec is a persisted lease read back when the store opens.
type leaseRec struct {
	id       LeaseID
	ttl      time.Duration
	deadline time.Time
}

// restoreLeases gives every persisted lease a fresh full TTL from now: the
// time the store was closed does not count against its holders. The caller
// arms the returned leases once the transaction has committed.
func (t *boltTx) restoreLeases(now time.Time) ([]leaseRec, error) {
	var recs []leaseRec
	err := t.leases.ForEach(func(k, v []byte) error {
		ttl, _, err := decodeLease(v)
		if err != nil {
			return fmt.Errorf("lease %d: %w", binary.BigEndian.Uint64(k), err)
		}
		recs = append(recs, leaseRec{id: LeaseID(binary.BigEndian.Uint64(k)), ttl: ttl, deadline: now.Add(ttl)})
		return nil
	})
	if err != nil {
		return nil, err
	}
	for _, r := range recs {
		if err := t.leases.Put(u64(int64(r.id)), encodeLease(r.ttl, r.deadline)); err != nil {
			return nil, fmt.Errorf("lease %d: %w", r.id, err)
		}
	}
	return recs, nil
}

func encodeLease(ttl time.Duration, deadline time.Time) []byte {
	buf := make([]byte, 16)
	binary.BigEndian.PutUint64(buf[0:], uint64(ttl))
	binary.BigEndian.PutUint64(buf[8:], uint64(deadline.UnixNano()))
	return buf
}

func decodeLease(v []byte) (time.Duration, time.Time, error) {
	if len(v) != 16 {
		return 0, time.Time{}, fmt.Errorf("lease record of %d bytes, want 16: %w", len(v), errdefs.ErrInvalid)
	}
	ttl := time.Duration(binary.BigEndian.Uint64(v[0:]))
	return ttl, time.Unix(0, int64(binary.BigEndian.Uint64(v[8:]))), nil
}
