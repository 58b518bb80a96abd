package e2e

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestCPULimitsReachTheCgroup runs a container with --cpus and --cpu-shares
// and reads its cgroup on the host (v1 or v2).
func TestCPULimitsReachTheCgroup(t *testing.T) {
	d := startDaemon(t)
	d.busybox("busybox:1")
	c := d.runAttached("--cpus", "0.5", "--cpu-shares", "512", "busybox:1", "sleep", "600")
	read := func(paths ...string) string {
		for _, p := range paths {
			if b, err := os.ReadFile(p); err == nil {
				return strings.TrimSpace(string(b))
			}
		}
		t.Fatalf("none of %v exists", paths)
		return ""
	}
	v1 := filepath.Join("/sys/fs/cgroup/cpu", d.cgroup, c.ID)
	v2 := filepath.Join("/sys/fs/cgroup", d.cgroup, c.ID)
	if _, err := os.Stat(v1); err == nil {
		if q := read(filepath.Join(v1, "cpu.cfs_quota_us")); q != "50000" {
			t.Fatalf("cpu.cfs_quota_us = %s, want 50000 for --cpus 0.5", q)
		}
		if s := read(filepath.Join(v1, "cpu.shares")); s != "512" {
			t.Fatalf("cpu.shares = %s, want 512", s)
		}
	} else {
		if q := read(filepath.Join(v2, "cpu.max")); !strings.HasPrefix(q, "50000 ") {
			t.Fatalf("cpu.max = %s, want 50000 for --cpus 0.5", q)
		}
		if w := read(filepath.Join(v2, "cpu.weight")); w == "" || w == "100" {
			t.Fatalf("cpu.weight = %q, want the weight for 512 shares", w)
		}
	}
	d.must("rm", c.ID)
	r := d.shoal("run", "--rm", "--cpu-shares", "1", "busybox:1", "true")
	if r.code != 2 || !strings.Contains(r.stderr, "--cpu-shares") {
		t.Fatalf("--cpu-shares 1: code %d stderr %q, want a usage error", r.code, r.stderr)
	}
}
