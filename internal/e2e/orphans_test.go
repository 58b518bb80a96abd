package e2e

import (
	"bufio"
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"

	"github.com/shoal-run/shoal/internal/api/types"
	"github.com/shoal-run/shoal/internal/store"
)

// A container the daemon has no record of when it restarts after a crash
// (here an ephemeral `run --rm` container, never written to the store,
// running when the daemon was killed) is removed at start with everything
// it held: its processes, runc state, overlay mount, bundle, cgroups and
// network namespace.
func TestDaemonKillRemovesOrphans(t *testing.T) {
	d := startDaemon(t)
	d.busybox("busybox:1")
	row := d.runAttached("--rm", "--network", "bridge", "busybox:1", "sleep", "600")
	cgroups := cgroupDirs(t, row.Pid)
	if len(cgroups) == 0 {
		t.Fatalf("no cgroup of container pid %d found", row.Pid)
	}
	var netns syscall.Stat_t
	if err := syscall.Stat(fmt.Sprintf("/proc/%d/ns/net", row.Pid), &netns); err != nil {
		t.Fatal(err)
	}
	bundle := filepath.Join(d.dataDir, "containers", row.ID)
	if _, err := os.Stat(bundle); err != nil {
		t.Fatalf("bundle of the running container: %v", err)
	}

	d.stop(syscall.SIGKILL)
	d.start()

	if !gone(row.Pid) {
		t.Fatalf("orphan container pid %d still runs after the restart", row.Pid)
	}
	if rows := d.ps(); len(rows) != 0 {
		t.Fatalf("ps -a after the restart: %+v, want nothing", rows)
	}
	mounts, _ := os.ReadFile("/proc/self/mountinfo")
	if strings.Contains(string(mounts), bundle) {
		t.Errorf("a mount of orphan %s is left", row.ID)
	}
	for _, p := range []string{bundle, filepath.Join(d.runDir, "runc", row.ID)} {
		if _, err := os.Stat(p); !os.IsNotExist(err) {
			t.Errorf("%s of orphan %s is left (%v)", p, row.ID, err)
		}
	}
	for _, dir := range cgroups {
		if _, err := os.Stat(dir); !os.IsNotExist(err) {
			t.Errorf("cgroup %s of orphan %s is left (%v)", dir, row.ID, err)
		}
	}
	entries, _ := os.ReadDir(filepath.Join(d.runDir, "netns"))
	for _, e := range entries {
		var st syscall.Stat_t
		if syscall.Stat(filepath.Join(d.runDir, "netns", e.Name()), &st) == nil && st.Ino == netns.Ino && st.Dev == netns.Dev {
			t.Errorf("network namespace %s of orphan %s is left", e.Name(), row.ID)
		}
	}
}

// cgroupDirs lists the cgroup directories of pid, in every hierarchy.
func cgroupDirs(t *testing.T, pid int) []string {
	t.Helper()
	f, err := os.Open(fmt.Sprintf("/proc/%d/cgroup", pid))
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	var dirs []string
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		parts := strings.SplitN(sc.Text(), ":", 3)
		if len(parts) != 3 || parts[2] == "/" {
			continue
		}
		var dir string
		switch {
		case parts[1] == "":
			dir = filepath.Join("/sys/fs/cgroup", parts[2])
			if _, err := os.Stat("/sys/fs/cgroup/unified"); err == nil {
				dir = filepath.Join("/sys/fs/cgroup/unified", parts[2])
			}
		case strings.HasPrefix(parts[1], "name="):
			dir = filepath.Join("/sys/fs/cgroup", strings.TrimPrefix(parts[1], "name="), parts[2])
		default:
			dir = filepath.Join("/sys/fs/cgroup", strings.SplitN(parts[1], ",", 2)[0], parts[2])
		}
		if _, err := os.Stat(dir); err == nil {
			dirs = append(dirs, dir)
		}
	}
	return dirs
}

// A replica container whose record the store lost (the daemon died before
// writing it) is an orphan too: the next daemon removes it, and the app
// gets a replica of its own.
func TestDaemonKillRemovesUnrecordedReplica(t *testing.T) {
	d := startDaemon(t)
	d.exampleImage("hello")
	d.deploy(strings.Replace(manifest("1m", "10m"), "min = 0", "min = 1", 1))
	a := d.waitApp("hello", "a ready replica", func(a types.App) bool { return a.Ready == 1 })
	id, pid := a.Replicas[0].ID, a.Replicas[0].Pid
	d.stop(syscall.SIGKILL)
	st, err := store.OpenBolt(filepath.Join(d.dataDir, "store.db"))
	if err != nil {
		t.Fatal(err)
	}
	if err := st.Delete(context.Background(), store.ReplicaKey("hello", id)); err != nil {
		t.Fatal(err)
	}
	st.Close()
	d.start()
	if !gone(pid) {
		t.Fatalf("replica %s (pid %d) with no record still runs after the restart", id, pid)
	}
	a = d.waitApp("hello", "a new ready replica", func(a types.App) bool { return a.Ready == 1 })
	if a.Replicas[0].ID == id {
		t.Fatalf("the unrecorded replica %s is listed again: %+v", id, a.Replicas)
	}
	for _, r := range d.ps() {
		if r.ID == id {
			t.Fatalf("ps -a lists the removed replica container: %+v", r)
		}
	}
	if code, _, rep := get(t, d.proxyAddr(), "hello", "/"); code != 200 || rep == id {
		t.Fatalf("request after the restart: %d from %q", code, rep)
	}
}
