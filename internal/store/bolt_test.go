package store_test

import (
	"context"
	"errors"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/shoal-run/shoal/internal/clock"
	"github.com/shoal-run/shoal/internal/errdefs"
	"github.com/shoal-run/shoal/internal/store"
	"github.com/shoal-run/shoal/internal/store/storetest"
)

var epoch = time.Date(2030, 1, 1, 0, 0, 0, 0, time.UTC)

func TestBoltContract(t *testing.T) {
	var clocks sync.Map // *store.Bolt → *clock.Fake
	storetest.Run(t,
		func(t *testing.T) store.Store {
			fake := clock.NewFake(epoch)
			b, err := store.OpenBolt(filepath.Join(t.TempDir(), "shoal.db"), store.WithClock(fake))
			if err != nil {
				t.Fatal(err)
			}
			clocks.Store(b, fake)
			return b
		},
		storetest.WithAdvance(func(s store.Store, d time.Duration) {
			c, _ := clocks.Load(s)
			c.(*clock.Fake).Advance(d)
		}),
	)
}

func openBolt(t *testing.T, path string, c clock.Clock, opts ...store.BoltOption) *store.Bolt {
	t.Helper()
	b, err := store.OpenBolt(path, append([]store.BoltOption{store.WithClock(c)}, opts...)...)
	if err != nil {
		t.Fatalf("open: %v", err)
	}
	return b
}

func TestBoltReopenKeepsDataAndRevisions(t *testing.T) {
	ctx := context.Background()
	path := filepath.Join(t.TempDir(), "shoal.db")
	b := openBolt(t, path, clock.NewFake(epoch))
	r1, err := b.Put(ctx, store.AppKey("web"), []byte("v1"))
	if err != nil {
		t.Fatal(err)
	}
	r2, err := b.Put(ctx, store.AppKey("web"), []byte("v2"))
	if err != nil {
		t.Fatal(err)
	}
	if err := b.Close(); err != nil {
		t.Fatal(err)
	}

	b = openBolt(t, path, clock.NewFake(epoch))
	defer b.Close()
	kv, err := b.Get(ctx, store.AppKey("web"))
	if err != nil {
		t.Fatal(err)
	}
	if string(kv.Value) != "v2" || kv.CreateRev != r1 || kv.ModRev != r2 {
		t.Fatalf("after reopen: %+v, want v2 created at %d, changed at %d", kv, r1, r2)
	}
	r3, err := b.Put(ctx, store.AppKey("db"), []byte("x"))
	if err != nil {
		t.Fatal(err)
	}
	if r3 <= r2 {
		t.Fatalf("revision %d after reopen is not after %d", r3, r2)
	}
	schema, err := b.Get(ctx, store.MetaSchemaKey)
	if err != nil || string(schema.Value) != "1" {
		t.Fatalf("schema key: %q, %v; want 1", schema.Value, err)
	}
}

// waitGone waits for the delete event of key on ch.
func waitGone(t *testing.T, ch <-chan store.Event, key string) {
	t.Helper()
	timer := time.NewTimer(30 * time.Second)
	defer timer.Stop()
	for {
		select {
		case ev, ok := <-ch:
			if !ok {
				t.Fatalf("watch closed before %q was deleted", key)
			}
			if ev.Type == store.EventDelete && ev.KV.Key == key {
				return
			}
		case <-timer.C:
			t.Fatalf("%q was not deleted", key)
		}
	}
}

func TestBoltKeepAlivePushesDeadline(t *testing.T) {
	ctx := context.Background()
	fake := clock.NewFake(epoch)
	b := openBolt(t, filepath.Join(t.TempDir(), "shoal.db"), fake)
	defer b.Close()
	id, err := b.Grant(ctx, 10*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := b.Put(ctx, "/n/a", nil, store.WithLease(id)); err != nil {
		t.Fatal(err)
	}
	ch, err := b.Watch(ctx, "/n/")
	if err != nil {
		t.Fatal(err)
	}
	fake.Advance(6 * time.Second)
	if err := b.KeepAlive(ctx, id); err != nil {
		t.Fatal(err)
	}
	fake.Advance(6 * time.Second) // 12s after grant, 6s after the keepalive
	if _, err := b.Get(ctx, "/n/a"); err != nil {
		t.Fatalf("key of a kept-alive lease: %v", err)
	}
	fake.Advance(4 * time.Second) // 10s after the keepalive
	waitGone(t, ch, "/n/a")
}

func TestBoltReopenGivesLeasesFreshTTL(t *testing.T) {
	ctx := context.Background()
	path := filepath.Join(t.TempDir(), "shoal.db")
	fake := clock.NewFake(epoch)
	b := openBolt(t, path, fake)
	id, err := b.Grant(ctx, 10*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := b.Put(ctx, "/n/a", []byte("up"), store.WithLease(id)); err != nil {
		t.Fatal(err)
	}
	fake.Advance(8 * time.Second)
	if err := b.Close(); err != nil {
		t.Fatal(err)
	}

	fake = clock.NewFake(epoch.Add(time.Hour))
	b = openBolt(t, path, fake)
	defer b.Close()
	kv, err := b.Get(ctx, "/n/a")
	if err != nil || kv.Lease != id {
		t.Fatalf("leased key after reopen: %+v, %v; want lease %d", kv, err, id)
	}
	ch, err := b.Watch(ctx, "/n/")
	if err != nil {
		t.Fatal(err)
	}
	fake.Advance(8 * time.Second)
	if _, err := b.Get(ctx, "/n/a"); err != nil {
		t.Fatalf("lease ended before a full TTL after reopen: %v", err)
	}
	if err := b.KeepAlive(ctx, id); err != nil {
		t.Fatalf("keepalive after reopen: %v", err)
	}
	fake.Advance(10 * time.Second)
	waitGone(t, ch, "/n/a")
	// A later lease gets a new id.
	id2, err := b.Grant(ctx, time.Second)
	if err != nil || id2 == id {
		t.Fatalf("grant after reopen: id %d, %v; want an id other than %d", id2, err, id)
	}
}

func TestBoltRefusesNewerSchema(t *testing.T) {
	ctx := context.Background()
	path := filepath.Join(t.TempDir(), "shoal.db")
	b := openBolt(t, path, clock.Real{})
	if _, err := b.Put(ctx, store.MetaSchemaKey, []byte("2")); err != nil {
		t.Fatal(err)
	}
	if err := b.Close(); err != nil {
		t.Fatal(err)
	}
	_, err := store.OpenBolt(path)
	if !errors.Is(err, store.ErrNewerSchema) || !strings.Contains(err.Error(), path) {
		t.Fatalf("open of a newer schema: %v; want ErrNewerSchema naming %s", err, path)
	}
}

func TestBoltLockedFile(t *testing.T) {
	path := filepath.Join(t.TempDir(), "shoal.db")
	b := openBolt(t, path, clock.Real{})
	defer b.Close()
	_, err := store.OpenBolt(path, store.WithLockTimeout(50*time.Millisecond))
	if !errors.Is(err, errdefs.ErrUnavailable) || !strings.Contains(err.Error(), path) {
		t.Fatalf("second open: %v; want unavailable naming %s", err, path)
	}
}

func TestBoltSlowWatcherIsClosed(t *testing.T) {
	ctx := context.Background()
	b := openBolt(t, filepath.Join(t.TempDir(), "shoal.db"), clock.Real{}, store.WithWatchBuffer(4))
	defer b.Close()
	ch, err := b.Watch(ctx, "/s/")
	if err != nil {
		t.Fatal(err)
	}
	for i := range 10 {
		if _, err := b.Put(ctx, "/s/k", []byte{byte(i)}); err != nil {
			t.Fatal(err)
		}
	}
	n := 0
	for range ch {
		n++
	}
	if n != 4 {
		t.Fatalf("slow watcher got %d events before its channel closed, want the 4 it had room for", n)
	}
}

func TestBoltCloseEndsWatches(t *testing.T) {
	b := openBolt(t, filepath.Join(t.TempDir(), "shoal.db"), clock.Real{})
	ch, err := b.Watch(context.Background(), "/")
	if err != nil {
		t.Fatal(err)
	}
	if err := b.Close(); err != nil {
		t.Fatal(err)
	}
	if _, ok := <-ch; ok {
		t.Fatal("watch channel delivered an event after close")
	}
	if _, err := b.Put(context.Background(), "/x", nil); !errors.Is(err, errdefs.ErrUnavailable) {
		t.Fatalf("put after close: %v, want unavailable", err)
	}
}
