package e2e

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
)

// TestRunPremade runs `shoal run --rm` of one shape several times: each
// run after the first takes a container made ahead (shoal-init is mounted
// in it, waiting for the command), with the output, exit code,
// environment, working directory, limits and errors of the ordinary path;
// premade containers are not listed, do not keep their image from being
// removed, and nothing is left of them when the daemon stops.
func TestRunPremade(t *testing.T) {
	d := startDaemon(t)
	d.busybox("busybox:1")
	seen := map[string]bool{}
	for i := 0; i < 5; i++ {
		script := fmt.Sprintf("echo out-%d; echo err-%d >&2; hostname; test -e /dev/shoal-init && echo premade; exit %d", i, i, i)
		r := d.shoal("run", "--rm", "busybox:1", "sh", "-c", script)
		lines := strings.Split(strings.TrimSuffix(r.stdout, "\n"), "\n")
		if r.code != i || r.stderr != fmt.Sprintf("err-%d\n", i) || len(lines) < 2 || lines[0] != fmt.Sprintf("out-%d", i) {
			t.Fatalf("run %d: code %d stdout %q stderr %q", i, r.code, r.stdout, r.stderr)
		}
		if id := lines[1]; seen[id] {
			t.Fatalf("run %d: container %s ran before", i, id)
		} else {
			seen[id] = true
		}
		if premade := len(lines) == 3 && lines[2] == "premade"; premade != (i > 0) {
			t.Fatalf("run %d: premade %v (stdout %q); want the first run ordinary, the next ones premade", i, premade, r.stdout)
		}
	}
	if rows := d.ps(); len(rows) != 0 {
		t.Fatalf("ps -a lists %+v: premade containers are not listed", rows)
	}

	if r := d.shoal("run", "--rm", "busybox:1", "nosuchcmd"); r.code != 1 || !strings.Contains(r.stderr, `"nosuchcmd"`) ||
		!strings.Contains(r.stderr, "not found") || r.stdout != "" {
		t.Fatalf("a command that does not exist: code %d stdout %q stderr %q; want 1 and an error naming it", r.code, r.stdout, r.stderr)
	}
	if out := d.must("run", "--rm", "-e", "A=1", "-e", "PATH=/bin", "-w", "/x/y", "busybox:1", "sh", "-c", `echo "$A $PATH $(pwd)"; cat`); out != "1 /bin /x/y\n" {
		t.Fatalf("environment, directory and stdin: %q", out)
	}
	for i := 0; i < 2; i++ {
		r := d.shoal("run", "--rm", "--timeout", "300ms", "busybox:1", "sleep", "60")
		if r.code != 137 || !strings.Contains(r.stderr, "timeout") {
			t.Fatalf("timeout, run %d: code %d stderr %q; want 137 and timeout", i, r.code, r.stderr)
		}
		r = d.shoal("run", "--rm", "--memory", "16Mi", "busybox:1", "sh", "-c", "tail /dev/zero")
		if r.code != 137 || !strings.Contains(r.stderr, "out of memory") {
			t.Fatalf("memory limit, run %d: code %d stderr %q; want 137 and out of memory", i, r.code, r.stderr)
		}
		out := d.must("run", "--rm", "--network", "bridge", "busybox:1", "ip", "-4", "addr", "show", "eth0")
		if !strings.Contains(out, "inet 10.") {
			t.Fatalf("bridge, run %d: eth0 has no address: %q", i, out)
		}
	}
	row := d.runAttached("--rm", "busybox:1", "sleep", "600")
	var listed []struct {
		ID, Image string
		Command   []string
	}
	if err := json.Unmarshal([]byte(d.must("ps", "-o", "json")), &listed); err != nil {
		t.Fatal(err)
	}
	if len(listed) != 1 || listed[0].ID != row.ID || listed[0].Image != "busybox:1" || strings.Join(listed[0].Command, " ") != "sleep 600" {
		t.Fatalf("ps lists %+v, want %s running sleep 600 of busybox:1", listed, row.ID)
	}
	d.must("rm", row.ID)
	if !gone(row.Pid) {
		t.Fatalf("pid %d still alive after rm", row.Pid)
	}

	d.must("image", "rm", "busybox:1")
	if entries, _ := os.ReadDir(filepath.Join(d.dataDir, "images", "snapshots")); len(entries) != 0 {
		t.Fatalf("%d snapshots left after the only image was removed", len(entries))
	}
	d.busybox("busybox:1")
	d.must("run", "--rm", "busybox:1", "true")
	d.must("run", "--rm", "--network", "bridge", "busybox:1", "true")

	d.stop(syscall.SIGTERM)
	waitFor(t, "nothing left once the daemon stopped", func() bool { return leftOfRuns(d) == "" })
}

// leftOfRuns says what is left of the daemon's containers: bundles,
// mounts, runtime state, cgroups and network namespaces.
func leftOfRuns(d *daemon) string {
	var left []string
	for _, dir := range []string{filepath.Join(d.dataDir, "containers"), filepath.Join(d.runDir, "runc"), filepath.Join(d.runDir, "netns")} {
		entries, _ := os.ReadDir(dir)
		for _, e := range entries {
			if !strings.HasPrefix(e.Name(), ".") {
				left = append(left, filepath.Join(dir, e.Name()))
			}
		}
	}
	mounts, _ := os.ReadFile("/proc/self/mountinfo")
	for _, l := range strings.Split(string(mounts), "\n") {
		if strings.Contains(l, filepath.Join(d.dataDir, "containers")+"/") {
			left = append(left, "mount "+l)
		}
	}
	roots, _ := filepath.Glob("/sys/fs/cgroup/*")
	for _, r := range append(roots, "/sys/fs/cgroup") {
		entries, _ := os.ReadDir(filepath.Join(r, d.cgroup))
		for _, e := range entries {
			if e.IsDir() {
				left = append(left, filepath.Join(r, d.cgroup, e.Name()))
			}
		}
	}
	return strings.Join(left, "\n")
}
