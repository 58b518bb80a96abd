package cluster

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/shoal-run/shoal/internal/clock"
	"github.com/shoal-run/shoal/internal/errdefs"
	"github.com/shoal-run/shoal/internal/store"
)

func states(t *testing.T, st store.Store) map[string]string {
	t.Helper()
	nodes, err := List(context.Background(), st)
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]string{}
	for _, n := range nodes {
		out[n.Name] = n.State
	}
	return out
}

// TestNodeStates walks a node through ready, draining, down and removed, and
// checks that a ready node cannot be removed.
func TestNodeStates(t *testing.T) {
	ctx := context.Background()
	clk := clock.NewFake(time.Unix(1000, 0))
	st := openBolt(t, clk)
	joined := time.Unix(500, 0).UTC()
	for _, n := range []string{"n1", "n2"} {
		if err := Join(ctx, st, Record{Name: n, Addr: "10.0.0.1:7070", CPUs: 2, Memory: 1 << 30, Joined: joined}); err != nil {
			t.Fatal(err)
		}
	}
	if got := states(t, st); got["n1"] != StateDown || got["n2"] != StateDown {
		t.Fatalf("without heartbeats: %v; want both down", got)
	}
	lease, _ := st.Grant(ctx, 3*time.Second)
	st.Put(ctx, store.AliveKey("n1"), []byte(`{"health":"ok"}`), store.WithLease(lease))
	if got := states(t, st); got["n1"] != StateReady || got["n2"] != StateDown {
		t.Fatalf("n1 beating: %v; want n1 ready, n2 down", got)
	}
	err := Remove(ctx, st, "n1")
	if !errors.Is(err, ErrLive) || !errdefs.IsConflict(err) {
		t.Fatalf("remove of a ready node: %v; want ErrLive, conflict", err)
	}
	if err := Drain(ctx, st, "n1"); err != nil {
		t.Fatal(err)
	}
	if got := states(t, st); got["n1"] != StateDraining {
		t.Fatalf("after drain: %v; want n1 draining", got)
	}
	// Joining again (a restart) keeps the drain mark and the first join time.
	if err := Join(ctx, st, Record{Name: "n1", Addr: "10.0.0.9:7070", CPUs: 4, Joined: time.Unix(900, 0)}); err != nil {
		t.Fatal(err)
	}
	n, err := Get(ctx, st, "n1")
	if err != nil || n.State != StateDraining || n.Addr != "10.0.0.9:7070" || n.CPUs != 4 || !n.Joined.Equal(joined) {
		t.Fatalf("after rejoin: %+v, %v; want draining at the new address, joined %v", n, err, joined)
	}
	if err := Remove(ctx, st, "n1"); err != nil {
		t.Fatalf("remove of a draining node: %v", err)
	}
	if err := Remove(ctx, st, "n2"); err != nil {
		t.Fatalf("remove of a down node: %v", err)
	}
	if got := states(t, st); len(got) != 0 {
		t.Fatalf("after removing both: %v; want none", got)
	}
	if err := Drain(ctx, st, "n3"); !errdefs.IsNotFound(err) {
		t.Fatalf("drain of an unknown node: %v; want not found", err)
	}
	if err := Remove(ctx, st, "n3"); !errdefs.IsNotFound(err) {
		t.Fatalf("remove of an unknown node: %v; want not found", err)
	}
}

// TestLiveFollowsHeartbeats: the live set gains a node when its heartbeat
// starts and loses it when the lease expires.
func TestLiveFollowsHeartbeats(t *testing.T) {
	clk := clock.NewFake(time.Unix(1000, 0))
	st := openBolt(t, clk)
	ctx, cancel := context.WithCancel(context.Background())
	live := NewLive(st, clk, quiet)
	changed := live.Changed()
	done := make(chan struct{})
	go func() { live.Run(ctx); close(done) }()
	t.Cleanup(func() { cancel(); <-done })
	<-live.Ready()
	lease, err := st.Grant(ctx, 3*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	st.Put(ctx, store.AliveKey("n1"), []byte("{}"), store.WithLease(lease))
	wait := func(want int) {
		t.Helper()
		for {
			if got := live.Nodes(); len(got) == want {
				return
			}
			select {
			case <-changed:
			case <-time.After(10 * time.Second):
				t.Fatalf("live nodes %v; want %d", live.Nodes(), want)
			}
		}
	}
	wait(1)
	if got := live.Nodes(); got[0] != "n1" {
		t.Fatalf("live %v; want n1", got)
	}
	clk.Advance(3 * time.Second) // the lease runs out
	wait(0)
}
