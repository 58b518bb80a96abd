package cluster

import (
	"context"
	"errors"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/shoal-run/shoal/internal/errdefs"
	"github.com/shoal-run/shoal/internal/store"
	"github.com/shoal-run/shoal/internal/store/storetest"
)

func elector(t *testing.T, ep, name string) *Elector {
	t.Helper()
	st, err := store.OpenEtcd(context.Background(), []string{ep})
	if err != nil {
		t.Fatal(err)
	}
	e := &Elector{Client: st.Client(), Name: name, TTL: time.Second, Log: quiet}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { e.Run(ctx); close(done) }()
	t.Cleanup(func() { cancel(); <-done; st.Close() })
	return e
}

func until(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(20 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// TestLeaderFencing runs two candidates on a real etcd: one leads, and once
// its session lease is gone the other leads and the first one's fenced writes
// are refused by etcd.
func TestLeaderFencing(t *testing.T) {
	ctx := context.Background()
	ep := storetest.StartEtcd(t)
	st, err := store.OpenEtcd(ctx, []string{ep})
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	a := elector(t, ep, "a")
	aChanged := a.Changed()
	until(t, "a to lead", func() bool { return a.Leading() != nil })
	select {
	case <-aChanged:
	default:
		t.Fatal("a leads and its Changed channel was not told")
	}
	b := elector(t, ep, "b")
	until(t, "b to campaign", func() bool {
		kvs, _ := st.List(ctx, store.LeaderPrefix)
		return len(kvs) == 2
	})
	if b.Leading() != nil {
		t.Fatal("b leads while a holds the oldest key")
	}
	if l, err := Leader(ctx, st); err != nil || l != "a" {
		t.Fatalf("leader %q, %v; want a", l, err)
	}
	old := a.Leading().(*EtcdTerm)
	if _, err := old.Put(ctx, "/shoal/v1/test/fenced", []byte("a")); err != nil {
		t.Fatalf("write by the leader: %v", err)
	}
	// a is cut off: its session lease ends as if it had not been renewed.
	kv, err := st.Get(ctx, old.Key)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := st.Client().Revoke(ctx, clientv3.LeaseID(kv.Lease)); err != nil {
		t.Fatal(err)
	}
	until(t, "b to lead", func() bool { return b.Leading() != nil })
	if l, err := Leader(ctx, st); err != nil || l != "b" {
		t.Fatalf("leader %q, %v; want b", l, err)
	}
	_, err = old.Put(ctx, "/shoal/v1/test/fenced", []byte("a again"))
	if !errors.Is(err, ErrDeposed) || !errdefs.IsConflict(err) {
		t.Fatalf("write by the deposed leader: %v; want ErrDeposed", err)
	}
	if err := old.Delete(ctx, "/shoal/v1/test/fenced"); !errors.Is(err, ErrDeposed) {
		t.Fatalf("delete by the deposed leader: %v; want ErrDeposed", err)
	}
	until(t, "a to be told it no longer leads", func() bool {
		select {
		case <-aChanged:
			return a.Leading() == nil
		default:
			return false
		}
	})
	if _, err := b.Leading().Put(ctx, "/shoal/v1/test/fenced", []byte("b")); err != nil {
		t.Fatalf("write by the new leader: %v", err)
	}
	got, err := st.Get(ctx, "/shoal/v1/test/fenced")
	if err != nil || string(got.Value) != "b" {
		t.Fatalf("fenced key %q, %v; want b", got.Value, err)
	}
	// A fenced compare-and-swap: the deposed term is refused even at the
	// key's revision; the leader's is refused at an old revision only.
	if _, err := old.CompareAndSwap(ctx, "/shoal/v1/test/fenced", got.ModRev, []byte("a")); !errors.Is(err, ErrDeposed) {
		t.Fatalf("compare-and-swap by the deposed leader: %v; want ErrDeposed", err)
	}
	if _, err := b.Leading().CompareAndSwap(ctx, "/shoal/v1/test/fenced", got.ModRev-1, []byte("b2")); !errdefs.IsConflict(err) || errors.Is(err, ErrDeposed) {
		t.Fatalf("compare-and-swap at an old revision: %v; want a conflict, not ErrDeposed", err)
	}
	if _, err := b.Leading().CompareAndSwap(ctx, "/shoal/v1/test/fenced", got.ModRev, []byte("b2")); err != nil {
		t.Fatalf("compare-and-swap by the leader: %v", err)
	}
	if _, err := b.Leading().CompareAndSwap(ctx, "/shoal/v1/test/new", 0, []byte("n")); err != nil {
		t.Fatalf("create by the leader: %v", err)
	}
	if err := b.Leading().Delete(ctx, "/shoal/v1/test/fenced"); err != nil {
		t.Fatalf("delete by the new leader: %v", err)
	}
	if _, err := st.Get(ctx, "/shoal/v1/test/fenced"); !errdefs.IsNotFound(err) {
		t.Fatalf("fenced key after the leader's delete: %v; want not found", err)
	}
	if err := b.Leading().Delete(ctx, "/shoal/v1/test/fenced"); err != nil {
		t.Fatalf("delete of a key already gone: %v", err)
	}
	// a campaigns again and waits behind b.
	until(t, "a to campaign again", func() bool {
		kvs, _ := st.List(ctx, store.LeaderPrefix)
		return len(kvs) == 2
	})
	if a.Leading() != nil {
		t.Fatal("a leads again while b holds the oldest key")
	}
}
