package daemon

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/shoal-run/shoal/internal/certs"
	"github.com/shoal-run/shoal/internal/certs/certstest"
	"github.com/shoal-run/shoal/internal/clock"
	"github.com/shoal-run/shoal/internal/errdefs"
	"github.com/shoal-run/shoal/internal/secrets"
	"github.com/shoal-run/shoal/internal/store"
)

// TestClusterCertsKeyKeptOffTheStore: in a cluster whose only shared
// secret is the one kept in the store, a certificate's key is not sealed
// with a key derived from it (anyone reading the store would open it);
// with --cluster-token-file it is, and what was sealed before still opens.
func TestClusterCertsKeyKeptOffTheStore(t *testing.T) {
	dir := t.TempDir()
	st, err := store.OpenBolt(filepath.Join(dir, "state.db"))
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	ctx := context.Background()
	own, err := secrets.LoadKey(filepath.Join(dir, "secrets.key"))
	if err != nil {
		t.Fatal(err)
	}
	ca := certstest.NewCA(t, "test CA")
	now := time.Now()
	certPEM, keyPEM := ca.Issue(t, []string{"www.example.test"}, now.Add(-time.Hour), now.Add(24*time.Hour))
	c, err := certs.Check("www.example.test", certPEM, keyPEM, now)
	if err != nil {
		t.Fatal(err)
	}
	c.Source = certs.SourceFile

	// No --cluster-token-file, no --secrets-key-file: the secret is made
	// in the store, and nothing is sealed with it.
	key, err := certsKey(ctx, st, true, "", "", own)
	if err != nil {
		t.Fatal(err)
	}
	err = certs.New(st, key, clock.Real{}).Put(ctx, c)
	if err == nil {
		kv, _ := st.Get(ctx, store.CertKey("www.example.test"))
		t.Fatalf("a cluster without a key off the store sealed a certificate's key: %s", kv.Value)
	}
	if !errors.Is(err, errdefs.ErrUnavailable) || !strings.Contains(err.Error(), "--cluster-token-file") || !strings.Contains(err.Error(), "--secrets-key-file") {
		t.Fatalf("refusal %v: want unavailable, naming --cluster-token-file and --secrets-key-file", err)
	}
	if _, err := st.Get(ctx, store.CertKey("www.example.test")); !errdefs.IsNotFound(err) {
		t.Fatalf("a refused certificate left a record: %v", err)
	}

	// A record sealed before (with the store's secret) still opens.
	kv, err := st.Get(ctx, store.ClusterSecretKey)
	if err != nil {
		// The secret was not made yet: make it as a node would.
		if _, err := st.Put(ctx, store.ClusterSecretKey, []byte("0123456789abcdef0123456789abcdef")); err != nil {
			t.Fatal(err)
		}
		kv, _ = st.Get(ctx, store.ClusterSecretKey)
	}
	stored, err := secrets.DeriveKey(strings.TrimSpace(string(kv.Value)), certsKeyLabel, "stored")
	if err != nil {
		t.Fatal(err)
	}
	if err := certs.New(st, stored, clock.Real{}).Put(ctx, c); err != nil {
		t.Fatal(err)
	}
	if key, err = certsKey(ctx, st, true, "", "", own); err != nil {
		t.Fatal(err)
	}
	if got, err := certs.New(st, key, clock.Real{}).Get(ctx, "www.example.test"); err != nil || string(got.KeyPEM) != string(c.KeyPEM) {
		t.Fatalf("a key sealed before, opened without --cluster-token-file: %v", err)
	}

	// With --cluster-token-file: sealed with its key, which another node
	// given the same file opens; the older record still opens.
	token := filepath.Join(dir, "cluster.token")
	if err := os.WriteFile(token, []byte("a-cluster-token-of-some-length\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	key, err = certsKey(ctx, st, true, "", token, own)
	if err != nil {
		t.Fatal(err)
	}
	cs := certs.New(st, key, clock.Real{})
	if _, err := cs.Get(ctx, "www.example.test"); err != nil {
		t.Fatalf("a key sealed with the store's secret, after --cluster-token-file: %v", err)
	}
	if err := cs.Put(ctx, c); err != nil {
		t.Fatal(err)
	}
	other, err := secrets.LoadKey(filepath.Join(dir, "other.key"))
	if err != nil {
		t.Fatal(err)
	}
	otherKey, err := certsKey(ctx, st, true, "", token, other)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := certs.New(st, otherKey, clock.Real{}).Get(ctx, "www.example.test"); err != nil {
		t.Fatalf("another node with the same token file: %v", err)
	}
	if err := st.Delete(ctx, store.ClusterSecretKey); err != nil {
		t.Fatal(err)
	}
	if _, err := certs.New(st, otherKey, clock.Real{}).Get(ctx, "www.example.test"); err != nil {
		t.Fatalf("with the store's secret gone: %v", err)
	}

	// One host, or --secrets-key-file: the node's own key seals.
	for _, inCluster := range []bool{false, true} {
		keyFile := ""
		if inCluster {
			keyFile = filepath.Join(dir, "secrets.key")
		}
		k, err := certsKey(ctx, st, inCluster, keyFile, "", own)
		if err != nil || k != own {
			t.Fatalf("cluster %v, key file %q: %v, %v; want the node's own key", inCluster, keyFile, k, err)
		}
	}
}
