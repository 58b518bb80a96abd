package cluster

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/shoal-run/shoal/internal/clock"
	"github.com/shoal-run/shoal/internal/errdefs"
	"github.com/shoal-run/shoal/internal/store"
)

// Nodes that join together without a token file agree on one secret, made
// once and kept in the store; a node joining later reads the same.
func TestSecretMadeOnce(t *testing.T) {
	ctx := context.Background()
	st := openBolt(t, clock.NewFake(time.Unix(1000, 0)))
	got := make([]string, 8)
	var wg sync.WaitGroup
	for i := range got {
		wg.Add(1)
		go func() {
			defer wg.Done()
			s, err := Secret(ctx, st, "")
			if err != nil {
				t.Error(err)
			}
			got[i] = s
		}()
	}
	wg.Wait()
	if len(got[0]) != 64 {
		t.Fatalf("secret %q: want 64 hex digits", got[0])
	}
	for _, s := range got {
		if s != got[0] {
			t.Fatalf("nodes disagree on the secret: %q", got)
		}
	}
	kv, err := st.Get(ctx, store.ClusterSecretKey)
	if err != nil || string(kv.Value) != got[0] {
		t.Fatalf("store holds %q, %v; want %q", kv.Value, err, got[0])
	}
	if s, err := Secret(ctx, st, ""); err != nil || s != got[0] {
		t.Fatalf("later join: %q, %v", s, err)
	}
}

// A token file wins over the store; a missing or short one, or one that
// others than its owner may read or write, is refused naming the flag, and
// nothing is written to the store.
func TestSecretFile(t *testing.T) {
	ctx := context.Background()
	st := openBolt(t, clock.NewFake(time.Unix(1000, 0)))
	dir := t.TempDir()
	good := filepath.Join(dir, "good")
	os.WriteFile(good, []byte("0123456789abcdef0123\n"), 0o600)
	short := filepath.Join(dir, "short")
	os.WriteFile(short, []byte("abc\n"), 0o600)
	if s, err := Secret(ctx, st, good); err != nil || s != "0123456789abcdef0123" {
		t.Fatalf("file: %q, %v", s, err)
	}
	var shared []string
	for _, mode := range []os.FileMode{0o644, 0o640, 0o604, 0o620} {
		f := filepath.Join(dir, fmt.Sprintf("mode-%04o", mode))
		os.WriteFile(f, []byte("0123456789abcdef0123\n"), 0o600)
		if err := os.Chmod(f, mode); err != nil {
			t.Fatal(err)
		}
		shared = append(shared, f)
	}
	for _, f := range shared {
		_, err := Secret(ctx, st, f)
		if !errdefs.IsInvalid(err) || errdefs.Field(err) != "--cluster-token-file" || !strings.Contains(err.Error(), "chmod 600") {
			t.Fatalf("%s: %v; want an invalid --cluster-token-file saying chmod 600", f, err)
		}
	}
	for _, f := range []string{short, filepath.Join(dir, "missing")} {
		_, err := Secret(ctx, st, f)
		if !errdefs.IsInvalid(err) || errdefs.Field(err) != "--cluster-token-file" {
			t.Fatalf("%s: %v; want an invalid --cluster-token-file", f, err)
		}
	}
	if _, err := st.Get(ctx, store.ClusterSecretKey); !errdefs.IsNotFound(err) {
		t.Fatalf("store secret with a file: %v; want none", err)
	}
}
