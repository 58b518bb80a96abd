package secrets

import (
	"bytes"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

func TestSealRoundTrip(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "sub", "secrets.key")
	k, err := LoadKey(path)
	if err != nil {
		t.Fatal(err)
	}
	st, err := os.Stat(path)
	if err != nil || st.Mode().Perm() != 0o600 || st.Size() != KeySize {
		t.Fatalf("key file %v, %v: want 0600 and %d bytes", st.Mode(), err, KeySize)
	}
	again, err := LoadKey(path)
	if err != nil || again.ID != k.ID {
		t.Fatalf("loaded again: id %v, %v; want %s", again, err, k.ID)
	}
	value := []byte("hunter2\x00\xff binary too")
	s, err := k.Seal("web", "db_password", value)
	if err != nil {
		t.Fatal(err)
	}
	if bytes.Contains(s.Data, []byte("hunter2")) {
		t.Fatal("sealed data holds the plaintext")
	}
	got, err := again.Open("web", "db_password", s)
	if err != nil || !bytes.Equal(got, value) {
		t.Fatalf("opened %q, %v; want %q", got, err, value)
	}
	s2, _ := k.Seal("web", "db_password", value)
	if bytes.Equal(s.Nonce, s2.Nonce) || bytes.Equal(s.Data, s2.Data) {
		t.Fatal("two seals of one value are alike")
	}
	// Bound to its app and name, and to its bytes.
	if _, err := k.Open("api", "db_password", s); err == nil {
		t.Fatal("opened as another app's")
	}
	if _, err := k.Open("web", "other", s); err == nil {
		t.Fatal("opened as another name")
	}
	bad := s
	bad.Data = append([]byte{}, s.Data...)
	bad.Data[0] ^= 1
	if _, err := k.Open("web", "db_password", bad); err == nil {
		t.Fatal("opened a changed value")
	}
	// Another node's key says so.
	other, err := LoadKey(filepath.Join(dir, "other.key"))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := other.Open("web", "db_password", s); err == nil || !strings.Contains(err.Error(), "--secrets-key-file") {
		t.Fatalf("another key: %v, want an error naming --secrets-key-file", err)
	}
}

func TestLoadKeyRefuses(t *testing.T) {
	dir := t.TempDir()
	open := filepath.Join(dir, "open.key")
	if err := os.WriteFile(open, bytes.Repeat([]byte{1}, KeySize), 0o644); err != nil {
		t.Fatal(err)
	}
	if _, err := LoadKey(open); err == nil || !strings.Contains(err.Error(), "chmod 600") {
		t.Fatalf("a key others read: %v", err)
	}
	short := filepath.Join(dir, "short.key")
	if err := os.WriteFile(short, []byte("abc"), 0o600); err != nil {
		t.Fatal(err)
	}
	if _, err := LoadKey(short); err == nil || !strings.Contains(err.Error(), "3 bytes") {
		t.Fatalf("a short key: %v", err)
	}
}

// A key derived from a cluster's secret is the same on every node; with
// an older key it still opens what the older one sealed, and seals with
// its own.
func TestDeriveKeyWithOlder(t *testing.T) {
	a, err := DeriveKey("0123456789abcdef0123", "label", "derived")
	if err != nil {
		t.Fatal(err)
	}
	b, _ := DeriveKey("0123456789abcdef0123", "label", "derived")
	other, _ := DeriveKey("0123456789abcdef0123", "another label", "derived")
	if a.ID != b.ID || a.ID == other.ID {
		t.Fatalf("derived ids %s, %s, %s: same secret and label alike, another label not", a.ID, b.ID, other.ID)
	}
	if _, err := DeriveKey("short", "label", "derived"); err == nil {
		t.Fatal("derived from a secret of 5 bytes")
	}
	old, err := LoadKey(filepath.Join(t.TempDir(), "old.key"))
	if err != nil {
		t.Fatal(err)
	}
	sealedOld, _ := old.Seal("app", "n", []byte("v1"))
	k := a.WithOlder(old)
	if got, err := k.Open("app", "n", sealedOld); err != nil || string(got) != "v1" {
		t.Fatalf("opened the older key's record: %q, %v", got, err)
	}
	if _, err := a.Open("app", "n", sealedOld); err == nil {
		t.Fatal("the derived key alone opened the older key's record")
	}
	s, _ := k.Seal("app", "n", []byte("v2"))
	if s.KeyID != a.ID {
		t.Fatalf("sealed with key %s, want the derived %s", s.KeyID, a.ID)
	}
	if got, err := b.Open("app", "n", s); err != nil || string(got) != "v2" {
		t.Fatalf("another node's derived key: %q, %v", got, err)
	}
}

func TestOpenOnlyRefusesToSeal(t *testing.T) {
	k, err := LoadKey(filepath.Join(t.TempDir(), "k.key"))
	if err != nil {
		t.Fatal(err)
	}
	sealed, _ := k.Seal("app", "n", []byte("v"))
	why := errors.New("no key kept off the store")
	ro := k.OpenOnly(why)
	if got, err := ro.Open("app", "n", sealed); err != nil || string(got) != "v" {
		t.Fatalf("an open-only key opening its own record: %q, %v", got, err)
	}
	if _, err := ro.Seal("app", "n", []byte("v")); !errors.Is(err, why) {
		t.Fatalf("an open-only key sealed: %v; want %v", err, why)
	}
	if ro.CanSeal() != why || k.CanSeal() != nil {
		t.Fatalf("CanSeal: %v, %v", ro.CanSeal(), k.CanSeal())
	}
}
