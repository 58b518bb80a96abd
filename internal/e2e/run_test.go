package e2e

import (
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

func TestRun(t *testing.T) {
	d := startDaemon(t)
	d.busybox("busybox:1")

	t.Run("stdout and stderr stream apart", func(t *testing.T) {
		r := d.shoal("run", "--rm", "busybox:1", "sh", "-c", "echo out; echo err >&2")
		if r.code != 0 || r.stdout != "out\n" || r.stderr != "err\n" {
			t.Fatalf("got code %d stdout %q stderr %q", r.code, r.stdout, r.stderr)
		}
	})
	t.Run("exit code propagates", func(t *testing.T) {
		if r := d.shoal("run", "--rm", "busybox:1", "sh", "-c", "exit 3"); r.code != 3 {
			t.Fatalf("exit code %d, want 3 (stderr %q)", r.code, r.stderr)
		}
	})
	t.Run("memory limit kill is 137 and says out of memory", func(t *testing.T) {
		// tail buffers all of /dev/zero (no newlines) until the limit kills it.
		r := d.shoal("run", "--rm", "--memory", "16Mi", "busybox:1", "sh", "-c", "tail /dev/zero")
		if r.code != 137 || !strings.Contains(r.stderr, "out of memory") {
			t.Fatalf("got code %d stderr %q; want 137 and out of memory", r.code, r.stderr)
		}
	})
	t.Run("timeout kills", func(t *testing.T) {
		r := d.shoal("run", "--rm", "--timeout", "300ms", "busybox:1", "sleep", "60")
		if r.code != 137 || !strings.Contains(r.stderr, "timeout") {
			t.Fatalf("got code %d stderr %q; want 137 and timeout", r.code, r.stderr)
		}
	})
	t.Run("pids limit stops forks", func(t *testing.T) {
		script := "for i in $(seq 40); do sleep 2 & done; echo all-started"
		if r := d.shoal("run", "--rm", "--timeout", "30s", "busybox:1", "sh", "-c", script); r.code != 0 || !strings.Contains(r.stdout, "all-started") {
			t.Fatalf("without a tight pids limit: code %d stdout %q stderr %q", r.code, r.stdout, r.stderr)
		}
		r := d.shoal("run", "--rm", "--pids", "16", "--timeout", "30s", "busybox:1", "sh", "-c", script)
		if r.code == 0 || strings.Contains(r.stdout, "all-started") || !strings.Contains(r.stderr, "fork") {
			t.Fatalf("with --pids 16: code %d stdout %q stderr %q; want a failed fork", r.code, r.stdout, r.stderr)
		}
	})
	t.Run("network none has only loopback", func(t *testing.T) {
		out := d.must("run", "--rm", "busybox:1", "ls", "/sys/class/net")
		if strings.TrimSpace(out) != "lo" {
			t.Fatalf("interfaces %q, want only lo", out)
		}
	})
	t.Run("network bridge has eth0 with an address", func(t *testing.T) {
		out := d.must("run", "--rm", "--network", "bridge", "busybox:1", "ip", "-4", "addr", "show", "eth0")
		if !strings.Contains(out, "inet 10.") {
			t.Fatalf("eth0 has no address: %q", out)
		}
	})
	t.Run("rootfs changes stay in the container", func(t *testing.T) {
		d.must("run", "--rm", "busybox:1", "sh", "-c", "echo x > /bin/marker")
		if r := d.shoal("run", "--rm", "busybox:1", "cat", "/bin/marker"); r.code == 0 {
			t.Fatalf("a file written by one container is visible in the next: %q", r.stdout)
		}
	})
	t.Run("--rm leaves nothing behind", func(t *testing.T) {
		// Its hostname is its id; a container made ahead for the next run
		// may be there (TestRunPremade checks nothing is left of those).
		id := strings.TrimSpace(d.must("run", "--rm", "busybox:1", "hostname"))
		if out := d.must("ps", "-a", "-o", "json"); strings.TrimSpace(out) != "[]" {
			t.Fatalf("ps -a after run --rm = %s", out)
		}
		// Removal finishes right after the answer; wait for it.
		bundle := filepath.Join(d.dataDir, "containers", id)
		for i := 0; ; i++ {
			_, err := os.Stat(bundle)
			mounts, _ := os.ReadFile("/proc/self/mountinfo")
			if os.IsNotExist(err) && !strings.Contains(string(mounts), bundle) {
				break
			}
			if i == 500 {
				t.Fatalf("after run --rm, bundle %s is left (%v)", bundle, err)
			}
			time.Sleep(10 * time.Millisecond)
		}
	})
	t.Run("without --rm the container is listed until rm", func(t *testing.T) {
		d.must("run", "busybox:1", "true")
		var cs []struct {
			ID, Status, Image string
		}
		if err := json.Unmarshal([]byte(d.must("ps", "-a", "-o", "json")), &cs); err != nil {
			t.Fatal(err)
		}
		if len(cs) != 1 || cs[0].Status != "stopped" || cs[0].Image != "busybox:1" {
			t.Fatalf("ps -a = %+v, want one stopped busybox:1 container", cs)
		}
		d.must("rm", cs[0].ID)
		if out := d.must("ps", "-a", "-o", "json"); strings.TrimSpace(out) != "[]" {
			t.Fatalf("after rm, ps -a = %s", out)
		}
		bundle := filepath.Join(d.dataDir, "containers", cs[0].ID)
		if _, err := os.Stat(bundle); !os.IsNotExist(err) {
			t.Fatalf("bundle %s still exists after rm", bundle)
		}
	})
}
