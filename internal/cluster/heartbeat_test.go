package cluster

import (
	"context"
	"errors"
	"io"
	"log/slog"
	"path/filepath"
	"sync/atomic"
	"testing"
	"time"

	"github.com/shoal-run/shoal/internal/clock"
	"github.com/shoal-run/shoal/internal/errdefs"
	"github.com/shoal-run/shoal/internal/store"
)

var quiet = slog.New(slog.NewTextHandler(io.Discard, nil))

func openBolt(t *testing.T, clk clock.Clock) *store.Bolt {
	t.Helper()
	b, err := store.OpenBolt(filepath.Join(t.TempDir(), "store.db"), store.WithClock(clk))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { b.Close() })
	return b
}

// flaky is a store whose lease renewals fail while down is set.
type flaky struct {
	store.Store
	down atomic.Bool
}

func (f *flaky) KeepAlive(ctx context.Context, id store.LeaseID) error {
	if f.down.Load() {
		return errors.New("store unreachable")
	}
	return f.Store.KeepAlive(ctx, id)
}

func (f *flaky) Grant(ctx context.Context, ttl time.Duration) (store.LeaseID, error) {
	if f.down.Load() {
		return 0, errors.New("store unreachable")
	}
	return f.Store.Grant(ctx, ttl)
}

// beat runs a Heartbeat and returns the channel of its steps.
func beat(t *testing.T, st store.Store, clk clock.Clock, ttl time.Duration) <-chan Status {
	t.Helper()
	steps := make(chan Status, 100)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	h := &Heartbeat{Store: st, Clock: clk, Name: "n1", TTL: ttl, Log: quiet, Observe: func(s Status) { steps <- s }}
	go func() { h.Run(ctx); close(done) }()
	t.Cleanup(func() { cancel(); <-done })
	return steps
}

func next(t *testing.T, steps <-chan Status) Status {
	t.Helper()
	select {
	case s := <-steps:
		return s
	case <-time.After(10 * time.Second):
		t.Fatal("no heartbeat step")
	}
	return Status{}
}

func alive(t *testing.T, st store.Store) bool {
	t.Helper()
	_, err := st.Get(context.Background(), store.AliveKey("n1"))
	if err != nil && !errdefs.IsNotFound(err) {
		t.Fatal(err)
	}
	return err == nil
}

// TestHeartbeatKeepsKeyAlive: renewals every TTL/3 keep the key well past
// its TTL.
func TestHeartbeatKeepsKeyAlive(t *testing.T) {
	clk := clock.NewFake(time.Unix(1000, 0))
	st := openBolt(t, clk)
	steps := beat(t, st, clk, 3*time.Second)
	first := next(t, steps)
	if !first.Alive || first.Lease == 0 || !alive(t, st) {
		t.Fatalf("first step %+v, key there %v; want alive with a lease", first, alive(t, st))
	}
	for range 10 { // 10s of fake time, over three TTLs
		clk.Advance(time.Second)
		if s := next(t, steps); !s.Alive || s.Lease != first.Lease {
			t.Fatalf("step %+v; want alive on lease %d", s, first.Lease)
		}
	}
	if !alive(t, st) {
		t.Fatal("heartbeat key gone while renewed")
	}
}

// TestHeartbeatLostAndBack: renewals that fail for a full TTL let the key go;
// the node counts itself lost and registers on a new lease once the store
// answers again.
func TestHeartbeatLostAndBack(t *testing.T) {
	clk := clock.NewFake(time.Unix(1000, 0))
	f := &flaky{Store: openBolt(t, clk)}
	steps := beat(t, f, clk, 3*time.Second)
	first := next(t, steps)
	f.down.Store(true)
	clk.Advance(time.Second)
	if s := next(t, steps); s.Alive || s.Lost || s.Lease != first.Lease {
		t.Fatalf("after one failed renewal: %+v; want failed but not lost", s)
	}
	clk.Advance(time.Second)
	if s := next(t, steps); s.Lost {
		t.Fatalf("lost after 2s of a 3s TTL: %+v", s)
	}
	clk.Advance(time.Second)
	s := next(t, steps)
	if !s.Lost || s.Lease != first.Lease {
		t.Fatalf("after a full TTL without renewal: %+v; want lost, still renewing lease %d", s, first.Lease)
	}
	// The store drops the key when the lease's own timer fires.
	for i := 0; alive(t, f); i++ {
		if i > 1000 {
			t.Fatal("heartbeat key still there after its lease expired")
		}
		time.Sleep(10 * time.Millisecond)
	}
	f.down.Store(false)
	clk.Advance(time.Second)
	if s = next(t, steps); !s.Lost || s.Lease != 0 {
		t.Fatalf("the store back, without the lease: %+v; want lost, the lease dropped", s)
	}
	clk.Advance(time.Second)
	s = next(t, steps)
	if !s.Alive || s.Lease == 0 || s.Lease == first.Lease || !alive(t, f) {
		t.Fatalf("after the store came back: %+v; want alive on a new lease", s)
	}
}

// TestHeartbeatKeepsLeaseTheStoreKept: renewals that fail for a full TTL
// count the node lost, but a store that kept the lease meanwhile (etcd
// extends its leases when it elects a new leader) gets it renewed: the
// node is back on the same lease, its key never dropped.
func TestHeartbeatKeepsLeaseTheStoreKept(t *testing.T) {
	clk := clock.NewFake(time.Unix(1000, 0))
	// The store's own clock stands still: its leases do not expire.
	f := &flaky{Store: openBolt(t, clock.NewFake(time.Unix(1000, 0)))}
	steps := beat(t, f, clk, 3*time.Second)
	first := next(t, steps)
	f.down.Store(true)
	var s Status
	for range 4 {
		clk.Advance(time.Second)
		s = next(t, steps)
	}
	if !s.Lost {
		t.Fatalf("after 4s of a 3s TTL without renewal: %+v; want lost", s)
	}
	f.down.Store(false)
	clk.Advance(time.Second)
	if s = next(t, steps); !s.Alive || s.Lease != first.Lease || !alive(t, f) {
		t.Fatalf("the store back with the lease kept: %+v; want alive on lease %d", s, first.Lease)
	}
}

// TestHeartbeatExpiredLease: a lease the store no longer knows is replaced
// at once, without waiting a TTL.
func TestHeartbeatExpiredLease(t *testing.T) {
	clk := clock.NewFake(time.Unix(1000, 0))
	st := openBolt(t, clk)
	steps := beat(t, st, clk, 3*time.Second)
	first := next(t, steps)
	if err := st.Revoke(context.Background(), first.Lease); err != nil {
		t.Fatal(err)
	}
	clk.Advance(time.Second)
	if s := next(t, steps); !s.Lost || s.Lease != 0 {
		t.Fatalf("renewal of a revoked lease: %+v; want lost", s)
	}
	clk.Advance(time.Second)
	if s := next(t, steps); !s.Alive || s.Lease == first.Lease || !alive(t, st) {
		t.Fatalf("after re-registering: %+v; want alive on a new lease", s)
	}
}
