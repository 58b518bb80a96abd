package e2e

import (
	"bufio"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
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
