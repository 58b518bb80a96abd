package runtime

import (
	"bytes"
	"context"
	"os"
	"os/exec"
	"testing"

	"golang.org/x/sys/unix"
)

// TestSealedRunc: the path New runs runc by is a sealed copy of the
// binary that runs, takes no write, and is made once.
func TestSealedRunc(t *testing.T) {
	bin, err := exec.LookPath("runc")
	if err != nil {
		t.Fatal(err)
	}
	p, err := sealedRunc(context.Background(), bin)
	if err != nil {
		t.Fatal(err)
	}
	if p == bin {
		t.Fatalf("sealedRunc returned the binary itself")
	}
	f, err := os.Open(p)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	seals, err := unix.FcntlInt(f.Fd(), unix.F_GET_SEALS, 0)
	if err != nil || seals != runcSeals {
		t.Fatalf("seals %#x, %v; want %#x", seals, err, runcSeals)
	}
	want, _ := os.ReadFile(bin)
	got, err := os.ReadFile(p)
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(got, want) {
		t.Fatalf("the copy (%d bytes) differs from %s (%d bytes)", len(got), bin, len(want))
	}
	if w, err := os.OpenFile(p, os.O_WRONLY, 0); err == nil {
		_, werr := w.Write([]byte("x"))
		w.Close()
		if werr == nil {
			t.Fatalf("the sealed copy took a write")
		}
	}
	if out, err := exec.Command(p, "--version").CombinedOutput(); err != nil || !bytes.Contains(out, []byte("runc")) {
		t.Fatalf("the copy does not run: %v %s", err, out)
	}
	if again, _ := sealedRunc(context.Background(), bin); again != p {
		t.Fatalf("a second call made another copy: %s, then %s", p, again)
	}
}
