package statemerge

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"golang.org/x/sys/unix"
)

// mergeBounded runs a merge and fails the test if it does not return: a
// merge that opened a FIFO would wait for a reader forever.
func mergeBounded(t *testing.T, policy, data, work, vol string) error {
	t.Helper()
	done := make(chan error, 1)
	go func() {
		_, err := Files(context.Background(), policy, data, work, vol)
		done <- err
	}()
	select {
	case err := <-done:
		return err
	case <-time.After(30 * time.Second):
		t.Fatal("the merge hangs on an entry swapped for a FIFO")
		return nil
	}
}

// TestMergeRefusesTargetSwappedAfterItsCheck: another replica of the app,
// still running, swaps a volume file the merge has checked (and journaled)
// for a FIFO or a device node before the merge opens it. The merge refuses
// it without waiting on the FIFO or writing to the device, and the state
// file stays for the next try.
func TestMergeRefusesTargetSwappedAfterItsCheck(t *testing.T) {
	t.Cleanup(func() { mergeStep = func(string, string) error { return nil } })
	for _, kind := range []string{"fifo", "device"} {
		t.Run(kind, func(t *testing.T) {
			root := t.TempDir()
			vol := filepath.Join(root, "vol")
			writeTree(t, vol, map[string]string{"x.log": "old\n"})
			data, work := replicaState(t, root, "r1", map[string]string{"x.log": "new\n"})
			target := filepath.Join(vol, "x.log")
			mergeStep = func(step, rel string) error {
				if step == "journal" {
					os.Remove(target)
					if kind == "fifo" {
						return unix.Mkfifo(target, 0o666)
					}
					// /dev/null's numbers: a write would vanish, so the
					// check is that the merge refused, not what it wrote.
					return unix.Mknod(target, syscall.S_IFCHR|0o666, int(unix.Mkdev(1, 3)))
				}
				return nil
			}
			err := mergeBounded(t, Append, data, work, vol)
			// A FIFO without a reader cannot even be opened for writing
			// without blocking (ENXIO); a device is opened and refused.
			if err == nil || !strings.Contains(err.Error(), "x.log: in the volume") {
				t.Fatalf("merge into a %s swapped in: %v, want it refused", kind, err)
			}
			if got := readFile(t, filepath.Join(data, "x.log")); got != "new\n" {
				t.Fatalf("the refused state file: %q", got)
			}
		})
	}
}

// TestMergeRefusesSourceSwappedForFIFO: a state entry that is a FIFO by
// the time it is opened (a hook container that still ran, say) is refused
// by both policies without waiting for a writer.
func TestMergeRefusesSourceSwappedForFIFO(t *testing.T) {
	root := t.TempDir()
	src, dst := filepath.Join(root, "src"), filepath.Join(root, "dst")
	os.MkdirAll(src, 0o755)
	os.MkdirAll(dst, 0o755)
	if err := unix.Mkfifo(filepath.Join(src, "x.log"), 0o666); err != nil {
		t.Fatal(err)
	}
	sroot, err := os.OpenRoot(src)
	if err != nil {
		t.Fatal(err)
	}
	defer sroot.Close()
	droot, err := os.OpenRoot(dst)
	if err != nil {
		t.Fatal(err)
	}
	defer droot.Close()
	done := make(chan [2]error, 1)
	go func() {
		_, _, _, aerr := appendFile(sroot, droot, "x.log")
		_, nerr := copyIfNewer(sroot, droot, root, "x.log", "x.tmp")
		done <- [2]error{aerr, nerr}
	}()
	select {
	case errs := <-done:
		for i, err := range errs {
			if err == nil || !strings.Contains(err.Error(), "not a regular file (fifo)") {
				t.Fatalf("policy %d: a FIFO state entry: %v, want it refused", i, err)
			}
		}
	case <-time.After(30 * time.Second):
		t.Fatal("the merge hangs on a FIFO state entry")
	}
	if ents, _ := os.ReadDir(dst); len(ents) != 0 {
		t.Fatalf("merged from a FIFO: %v", ents)
	}
}
