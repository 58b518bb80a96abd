package secrets

import (
	"bytes"
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
