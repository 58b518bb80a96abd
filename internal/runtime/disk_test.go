package runtime

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
)

// loopsUnder lists the loop devices whose backing file is under dir.
func loopsUnder(t *testing.T, dir string) []string {
	t.Helper()
	files, err := filepath.Glob("/sys/block/loop*/loop/backing_file")
	if err != nil {
		t.Fatal(err)
	}
	var out []string
	for _, f := range files {
		b, err := os.ReadFile(f)
		if err == nil && strings.HasPrefix(strings.TrimSpace(string(b)), dir+"/") {
			out = append(out, f)
		}
	}
	return out
}

// leftOf says what of a container with a disk is left: loop devices,
// mounts and the bundle.
func leftOf(t *testing.T, r *Runtime, id string) []string {
	t.Helper()
	var left []string
	left = append(left, loopsUnder(t, r.bundle(id))...)
	mps, err := mountsUnder(r.bundle(id))
	if err != nil {
		t.Fatal(err)
	}
	left = append(left, mps...)
	if _, err := os.Lstat(r.bundle(id)); err == nil {
		left = append(left, r.bundle(id))
	}
	return left
}

// A container with a disk of 64 MiB that writes 300 MB into its root file
// system gets ENOSPC, and the host's file system holds no more than the
// disk's size of it; deleting the container leaves no loop device, mount
// or file.
func TestDiskQuota(t *testing.T) {
	r := newTestRuntime(t, nil)
	t.Cleanup(r.Close)
	s := baseSpec(t, "sh", "-c", "dd if=/dev/zero of=/big bs=1M count=300; echo rc=$?; ls -l /big")
	s.DiskBytes = 64 << 20
	s.Limits.MemoryBytes = 128 << 20
	st, out, errOut := capture(t, r, s)
	if st.Code != 0 || !strings.Contains(errOut, "No space left on device") || strings.Contains(out, "rc=0") {
		t.Fatalf("status %+v, stdout %q, stderr %q: want dd to fail with ENOSPC", st, out, errOut)
	}
	var used int64
	var dev syscall.Stat_t
	if err := syscall.Stat(r.root, &dev); err != nil {
		t.Fatal(err)
	}
	// On the Root's own file system, not on the disk and the root mounted
	// below the bundle.
	filepath.Walk(r.bundle(s.ID), func(_ string, fi os.FileInfo, err error) error {
		if st, ok := fi.Sys().(*syscall.Stat_t); err == nil && ok && fi.Mode().IsRegular() && st.Dev == dev.Dev {
			used += st.Blocks * 512
		}
		return nil
	})
	img, err := os.Stat(filepath.Join(r.bundle(s.ID), "disk.img"))
	if err != nil {
		t.Fatalf("the container's disk: %v", err)
	}
	if img.Size() != 64<<20 {
		t.Fatalf("disk of %d bytes, want %d", img.Size(), 64<<20)
	}
	if used > 66<<20 {
		t.Fatalf("the container took %d bytes of the host's file system, above its disk of 64 MiB", used)
	}
	if len(loopsUnder(t, r.bundle(s.ID))) != 1 {
		t.Fatalf("loop devices of the container: %v, want one", loopsUnder(t, r.bundle(s.ID)))
	}
	if err := r.Delete(context.Background(), s.ID); err != nil {
		t.Fatal(err)
	}
	eventually(t, "nothing left of the container", func() bool { return len(leftOf(t, r, s.ID)) == 0 })
}

// A container's writable layer without a disk stays in its bundle, as
// before disks.
func TestNoDisk(t *testing.T) {
	r := newTestRuntime(t, nil)
	s := baseSpec(t, "sh", "-c", "echo hi > /f")
	st, _, errOut := capture(t, r, s)
	if st.Code != 0 {
		t.Fatalf("status %+v, stderr %q", st, errOut)
	}
	if _, err := os.Stat(filepath.Join(r.bundle(s.ID), "upper", "f")); err != nil {
		t.Fatalf("the write is not in the bundle's upper directory: %v", err)
	}
	if _, err := os.Stat(filepath.Join(r.bundle(s.ID), "disk.img")); err == nil {
		t.Fatal("a disk without DiskBytes")
	}
}

// A daemon killed with containers on disks: the next one adopts the
// recorded container (its disk stays mounted) and removes the orphan with
// its disk, loop device and mount, and the disks the killed one made
// ahead; Close removes the ones it made.
func TestDiskRecover(t *testing.T) {
	needRoot(t)
	records := &MemRecords{}
	dir := t.TempDir()
	opts := Options{Root: filepath.Join(dir, "containers"), RuntimeRoot: filepath.Join(dir, "runc"), Records: records, CgroupParent: testCgroupParent}
	r1, err := New(context.Background(), opts)
	if err != nil {
		t.Fatal(err)
	}
	keep := baseSpec(t, "sleep", "300")
	keep.DiskBytes = 32 << 20
	if _, err := r1.Run(context.Background(), keep); err != nil {
		t.Fatal(err)
	}
	orphan := baseSpec(t, "sleep", "300")
	orphan.DiskBytes = 32 << 20
	if _, err := r1.Run(context.Background(), orphan); err != nil {
		t.Fatal(err)
	}
	_ = records.Delete(context.Background(), orphan.ID)
	r1.disks.Wait() // the killed daemon's disks made ahead, mounted
	if n := len(loopsUnder(t, r1.diskDir())); n != disksKept {
		t.Fatalf("%d disks made ahead, want %d", n, disksKept)
	}

	r2, err := New(context.Background(), opts)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		for _, id := range []string{keep.ID, orphan.ID} {
			_ = r2.Delete(context.Background(), id)
		}
		r2.Close()
	})
	if _, _, err := r2.Recover(context.Background()); err != nil {
		t.Fatal(err)
	}
	eventually(t, "the orphan and the disks made ahead removed", func() bool {
		mps, _ := mountsUnder(r2.bundle(orphan.ID))
		pool, _ := mountsUnder(r2.diskDir())
		_, err := os.Lstat(r2.bundle(orphan.ID))
		return len(loopsUnder(t, r2.bundle(orphan.ID))) == 0 && len(mps) == 0 && err != nil &&
			len(loopsUnder(t, r2.diskDir())) == 0 && len(pool) <= 1
	})
	if mps, _ := mountsUnder(r2.bundle(keep.ID)); len(mps) != 2 {
		t.Fatalf("the adopted container's mounts: %v, want its disk and root", mps)
	}
	if err := r2.Delete(context.Background(), keep.ID); err != nil {
		t.Fatal(err)
	}
	r2.Close()
	eventually(t, "nothing left", func() bool { return len(leftOf(t, r2, keep.ID)) == 0 })
}
