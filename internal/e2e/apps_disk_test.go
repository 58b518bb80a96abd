package e2e

import (
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"

	"github.com/shoal-run/shoal/internal/api/types"
	"github.com/shoal-run/shoal/internal/mountinfo"
)

// A replica with disk = "64Mi" (and 128 MiB of memory) that writes 300 MB
// into its root file system gets ENOSPC, and the data dir's file system
// holds no more than the disk of it. The daemon killed with SIGKILL and
// started again adopts the replica with its disk; once the app is removed
// no loop device, mount or file of the replica is left (and once the
// daemon stops, none of its disks made ahead: the harness checks).
func TestAppDiskQuota(t *testing.T) {
	d := startDaemon(t)
	d.busybox("busybox:1")
	d.deploy(`
name = "filler"
image = "busybox:1"
command = ["sh", "-c", "dd if=/dev/zero of=/big bs=1M count=300; echo dd-exit=$?; df -k /; exec httpd -f -p 8080"]
[scale]
min = 1
max = 1
[resources]
memory = "128Mi"
disk = "64Mi"
`)
	a := d.waitApp("filler", "ready", func(a types.App) bool { return a.Ready == 1 })
	id := a.Replicas[0].ID
	var logs string
	waitFor(t, "dd's end in the log", func() bool {
		logs = d.shoal("app", "logs", "filler").stdout
		return strings.Contains(logs, "dd-exit=")
	})
	if !strings.Contains(logs, "No space left on device") || strings.Contains(logs, "dd-exit=0") {
		t.Fatalf("dd of 300 MB on a disk of 64 MiB:\n%s", logs)
	}
	containers := filepath.Join(d.dataDir, "containers")
	var used int64
	var dev syscall.Stat_t
	if err := syscall.Stat(containers, &dev); err != nil {
		t.Fatal(err)
	}
	// What the replica's files take on the data dir's own file system,
	// not on the disk and the root mounted below it.
	filepath.Walk(containers, func(_ string, fi os.FileInfo, err error) error {
		if st, ok := fi.Sys().(*syscall.Stat_t); err == nil && ok && fi.Mode().IsRegular() && st.Dev == dev.Dev {
			used += st.Blocks * 512
		}
		return nil
	})
	// The replica's disk, and the pool's images made ahead (a few KB each).
	if used > 70<<20 {
		t.Fatalf("the replica's files take %d bytes of the data dir's file system, above its disk of 64 MiB", used)
	}
	bundle := filepath.Join(containers, id)
	if n := len(loopDevicesUnder(bundle)); n != 1 {
		t.Fatalf("%d loop devices back onto the replica's bundle, want its disk's", n)
	}

	d.stop(syscall.SIGKILL)
	d.start()
	d.waitApp("filler", "the replica adopted", func(a types.App) bool { return a.Ready == 1 && a.Replicas[0].ID == id })
	if n := len(loopDevicesUnder(bundle)); n != 1 {
		t.Fatalf("after the restart, %d loop devices back onto the replica's bundle, want its disk's", n)
	}
	d.must("app", "rm", "filler")
	waitFor(t, "nothing left of the replica", func() bool {
		mps, _ := mountinfo.MountsUnder(bundle)
		_, err := os.Stat(bundle)
		return len(loopDevicesUnder(bundle)) == 0 && len(mps) == 0 && os.IsNotExist(err)
	})
}

// loopDevicesUnder lists the loop devices whose backing file is under dir.
func loopDevicesUnder(dir string) []string {
	files, _ := filepath.Glob("/sys/block/loop*/loop/backing_file")
	var out []string
	for _, f := range files {
		if b, err := os.ReadFile(f); err == nil && strings.HasPrefix(strings.TrimSpace(string(b)), dir+"/") {
			out = append(out, f)
		}
	}
	return out
}
