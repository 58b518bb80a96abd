package dataplane

import (
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
)

// The proxy's log is rotated while the proxy runs: past max bytes the
// file moves to .1 and writing goes on in a fresh one, through the same
// descriptor.
func TestRotatingLog(t *testing.T) {
	path := filepath.Join(t.TempDir(), "proxy.log")
	f, err := os.OpenFile(path, os.O_WRONLY|os.O_CREATE|os.O_APPEND, 0o600)
	if err != nil {
		t.Fatal(err)
	}
	fd, err := syscall.Dup(int(f.Fd()))
	f.Close()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { syscall.Close(fd) })
	l := NewRotatingLog(path, fd, 1000)
	line := strings.Repeat("x", 99) + "\n"
	for range 25 {
		if _, err := l.Write([]byte(line)); err != nil {
			t.Fatal(err)
		}
	}
	cur, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	old, err := os.ReadFile(path + ".1")
	if err != nil {
		t.Fatalf("no rotated log: %v", err)
	}
	if len(cur) > 1000 || len(old) > 1000 || len(old) == 0 {
		t.Fatalf("sizes after rotation: %d and %d (.1), want at most 1000 each", len(cur), len(old))
	}
	if (len(cur)+len(old))%100 != 0 || !strings.HasSuffix(string(cur), line) {
		t.Fatal("a line was split across the files")
	}
}
