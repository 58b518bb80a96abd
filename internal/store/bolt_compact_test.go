package store_test

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/shoal-run/shoal/internal/errdefs"
	"github.com/shoal-run/shoal/internal/store"
)

// A store that once held much and now holds little is compacted when it
// is opened again: bbolt never gives free pages back by itself. What it
// holds, and its revision, survive.
func TestBoltCompactsAtOpen(t *testing.T) {
	ctx := context.Background()
	path := filepath.Join(t.TempDir(), "shoal.db")
	b, err := store.OpenBolt(path)
	if err != nil {
		t.Fatal(err)
	}
	big := []byte(strings.Repeat("x", 64<<10))
	for i := 0; i < 200; i++ { // 12.5 MiB
		if _, err := b.Put(ctx, fmt.Sprintf("/events/%04d", i), big); err != nil {
			t.Fatal(err)
		}
	}
	rev, err := b.Put(ctx, "/apps/kept", []byte("yes"))
	if err != nil {
		t.Fatal(err)
	}
	for i := 0; i < 200; i++ {
		if err := b.Delete(ctx, fmt.Sprintf("/events/%04d", i)); err != nil {
			t.Fatal(err)
		}
	}
	b.Close()
	before := size(t, path)
	b, err = store.OpenBolt(path)
	if err != nil {
		t.Fatal(err)
	}
	defer b.Close()
	after := size(t, path)
	if after > before/4 {
		t.Fatalf("store file %d bytes before reopening, %d after; want it compacted", before, after)
	}
	kv, err := b.Get(ctx, "/apps/kept")
	if err != nil || string(kv.Value) != "yes" || kv.ModRev != rev {
		t.Fatalf("after compaction: %+v, %v; want yes at revision %d", kv, err, rev)
	}
	if next, err := b.Put(ctx, "/apps/next", nil); err != nil || next <= rev+200 {
		t.Fatalf("revision after compaction %d, %v; want past %d", next, err, rev+200)
	}
	if _, err := os.Stat(path + ".compact"); !os.IsNotExist(err) {
		t.Fatalf("compaction left its copy: %v", err)
	}
}

func size(t *testing.T, path string) int64 {
	t.Helper()
	st, err := os.Stat(path)
	if err != nil {
		t.Fatal(err)
	}
	return st.Size()
}

// An opener waits for the open lock that another opener holds from before
// its compaction until its file is open (bbolt's own lock is on the inode
// a compaction replaces), and gives up after its lock timeout.
func TestBoltOpenWaitsForTheOpenLock(t *testing.T) {
	path := filepath.Join(t.TempDir(), "shoal.db")
	f, err := os.OpenFile(path+".lock", os.O_RDWR|os.O_CREATE, 0o600)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	if err := unix.Flock(int(f.Fd()), unix.LOCK_EX); err != nil {
		t.Fatal(err)
	}
	_, err = store.OpenBolt(path, store.WithLockTimeout(50*time.Millisecond))
	if !errors.Is(err, errdefs.ErrUnavailable) {
		t.Fatalf("OpenBolt while another opener holds the open lock: %v, want ErrUnavailable", err)
	}
	unix.Flock(int(f.Fd()), unix.LOCK_UN)
	b, err := store.OpenBolt(path, store.WithLockTimeout(time.Second))
	if err != nil {
		t.Fatalf("OpenBolt once the open lock is free: %v", err)
	}
	b.Close()
}
