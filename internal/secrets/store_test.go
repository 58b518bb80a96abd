package secrets

import (
	"bytes"
	"context"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/shoal-run/shoal/internal/clock"
	"github.com/shoal-run/shoal/internal/errdefs"
	"github.com/shoal-run/shoal/internal/store"
)

// The store never holds a secret's value: the raw bbolt file is read for
// its bytes after a Set.
func TestStoreHoldsNoPlaintext(t *testing.T) {
	ctx := context.Background()
	dir := t.TempDir()
	dbPath := filepath.Join(dir, "store.db")
	st, err := store.OpenBolt(dbPath)
	if err != nil {
		t.Fatal(err)
	}
	key, err := LoadKey(filepath.Join(dir, "secrets.key"))
	if err != nil {
		t.Fatal(err)
	}
	fc := clock.NewFake(time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC))
	s := New(st, key, fc)
	value := []byte("correct-horse-battery-staple-7c1e")
	if _, err := s.Set(ctx, "web", "db_password", value); err != nil {
		t.Fatal(err)
	}
	if _, err := s.Set(ctx, "web", "API_KEY", []byte("k2")); err != nil {
		t.Fatal(err)
	}
	list, err := s.List(ctx, "web")
	if err != nil || len(list) != 2 || list[0].Name != "API_KEY" || list[1].Name != "db_password" ||
		list[1].Size != len(value) || !list[1].Updated.Equal(fc.Now()) {
		t.Fatalf("list %+v, %v", list, err)
	}
	got, err := s.Open(ctx, "web", []string{"db_password"})
	if err != nil || !bytes.Equal(got["db_password"], value) {
		t.Fatalf("open: %q, %v", got, err)
	}
	if _, err := s.Open(ctx, "web", []string{"missing"}); !errdefs.IsNotFound(err) {
		t.Fatalf("a secret not set: %v, want not found", err)
	}
	if _, err := s.Set(ctx, "web", "../x", value); errdefs.Field(err) != "name" {
		t.Fatalf("a bad name: %v", err)
	}
	if _, err := s.Set(ctx, "web", "big", make([]byte, MaxValue+1)); errdefs.Field(err) != "value" {
		t.Fatalf("a big value: %v", err)
	}
	if err := st.Close(); err != nil {
		t.Fatal(err)
	}
	raw, err := os.ReadFile(dbPath)
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Contains(raw, []byte("db_password")) {
		t.Fatal("the raw store lacks the secret's name: is this the store's file?")
	}
	if bytes.Contains(raw, value) {
		t.Fatal("the raw store holds the secret's value")
	}

	st, err = store.OpenBolt(dbPath)
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	s = New(st, key, fc)
	if err := s.Delete(ctx, "web", "db_password"); err != nil {
		t.Fatal(err)
	}
	if err := s.Delete(ctx, "web", "db_password"); !errdefs.IsNotFound(err) {
		t.Fatalf("deleted twice: %v", err)
	}
	if err := s.DeleteApp(ctx, "web"); err != nil {
		t.Fatal(err)
	}
	if list, err := s.List(ctx, "web"); err != nil || len(list) != 0 {
		t.Fatalf("after DeleteApp: %+v, %v", list, err)
	}
}
