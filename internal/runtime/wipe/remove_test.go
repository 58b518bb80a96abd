package wipe

import (
	"os"
	"path/filepath"
	"strconv"
	"testing"

	"golang.org/x/sys/unix"
)

// TestRemoveAll: removeAll removes a chain deeper than the descriptors it
// may hold, directories without permissions and a wide directory, and
// removes links without following them.
func TestRemoveAll(t *testing.T) {
	dir := t.TempDir()
	outside := filepath.Join(dir, "outside")
	if err := os.MkdirAll(filepath.Join(outside, "keep"), 0o755); err != nil {
		t.Fatal(err)
	}
	top := filepath.Join(dir, "top")
	if err := os.Mkdir(top, 0o755); err != nil {
		t.Fatal(err)
	}
	p := top
	for i := 0; i < 300; i++ {
		p = filepath.Join(p, "d")
		if err := os.Mkdir(p, 0o755); err != nil {
			t.Fatal(err)
		}
		if i%50 == 0 {
			os.Symlink(outside, filepath.Join(p, "link"))
			os.WriteFile(filepath.Join(p, "f"), []byte("x"), 0)
			for j := 0; j < 1500; j++ {
				os.Mkdir(filepath.Join(p, "w"+strconv.Itoa(j)), 0)
			}
			os.Chmod(p, 0)
		}
	}
	var lim unix.Rlimit
	if err := unix.Getrlimit(unix.RLIMIT_NOFILE, &lim); err != nil {
		t.Fatal(err)
	}
	low := lim
	low.Cur = 64
	if err := unix.Setrlimit(unix.RLIMIT_NOFILE, &low); err != nil {
		t.Fatal(err)
	}
	d, err := os.Open(dir)
	if err == nil {
		err = removeAll(int(d.Fd()), "top")
		d.Close()
	}
	unix.Setrlimit(unix.RLIMIT_NOFILE, &lim)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := os.Lstat(top); !os.IsNotExist(err) {
		t.Fatalf("%s left: %v", top, err)
	}
	if _, err := os.Stat(filepath.Join(outside, "keep")); err != nil {
		t.Fatalf("a link's target was removed: %v", err)
	}
}
