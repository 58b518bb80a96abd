package cgroups

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
)

// startIn starts a shell that forks a child and waits, in cgroup dir (a
// cgroup.procs file's directory), and returns its pid.
func startIn(t *testing.T, dir string) int {
	t.Helper()
	c := exec.Command("sh", "-c", "sleep 1000 & wait")
	c.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	if err := c.Start(); err != nil {
		t.Fatal(err)
	}
	done := make(chan struct{})
	go func() { c.Wait(); close(done) }()
	t.Cleanup(func() { syscall.Kill(-c.Process.Pid, syscall.SIGKILL); <-done })
	if dir != "" {
		if err := os.WriteFile(filepath.Join(dir, "cgroup.procs"), []byte(strconv.Itoa(c.Process.Pid)), 0); err != nil {
			t.Fatal(err)
		}
	}
	return c.Process.Pid
}

func readFile(t *testing.T, f string) string {
	t.Helper()
	b, err := os.ReadFile(f)
	if err != nil {
		t.Fatal(err)
	}
	return strings.TrimSpace(string(b))
}

// TestChildLive makes child cgroups on the host's real hierarchies: v1
// where the host has it, and v2 (the unified mount of a hybrid host).
func TestChildLive(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Fatal("needs root to make cgroups")
	}
	l, err := ReadLayout()
	if err != nil {
		t.Fatal(err)
	}
	if !l.V2Only() {
		t.Run("v1", func(t *testing.T) { childLiveV1(t, l) })
	}
	t.Run("v2", func(t *testing.T) { childLiveV2(t, l) })
	t.Run("v2 without cgroup.kill", func(t *testing.T) {
		// A kernel before 5.14: Kill freezes and kills each process.
		killFile = "cgroup.kill-absent"
		t.Cleanup(func() { killFile = "cgroup.kill" })
		childLiveV2(t, l)
	})
}

// childLiveV1 makes a child cgroup with limits in the v1 hierarchies,
// moves a process that has forked into it, kills everything there and
// removes it.
func childLiveV1(t *testing.T, l *Layout) {
	parent := l.Paths(fmt.Sprintf("/shoal-child-test-%d", os.Getpid()))
	for _, d := range parent.Child("").Dirs() {
		if err := os.MkdirAll(d, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	t.Cleanup(func() { parent.Remove() })
	c, err := parent.MakeChild("step1", ChildLimits{MemoryBytes: 64 << 20, Pids: 16, CPUs: 0.5})
	if err != nil {
		t.Fatal(err)
	}
	if got := readFile(t, filepath.Join(c.V1["memory"], "memory.limit_in_bytes")); got != strconv.Itoa(64<<20) {
		t.Fatalf("memory limit %s", got)
	}
	if got := readFile(t, filepath.Join(c.V1["pids"], "pids.max")); got != "16" {
		t.Fatalf("pids.max %s", got)
	}
	if got := readFile(t, filepath.Join(c.V1["cpu"], "cpu.cfs_quota_us")); got != "50000" {
		t.Fatalf("cpu quota %s", got)
	}
	if _, ok := c.V1["cpuset"]; ok {
		t.Fatal("a child made in the cpuset hierarchy: its tasks could not run without cpus and mems")
	}
	setLimitsV1(t, c, ChildLimits{MemoryBytes: 64 << 20, Pids: 16, CPUs: 0.5})
	pid := startIn(t, "")
	if err := c.Attach(pid); err != nil {
		t.Fatal(err)
	}
	procs, err := c.Procs()
	if err != nil || !slices.Contains(procs, pid) {
		t.Fatalf("procs %v (%v), want %d", procs, err, pid)
	}
	// Usage reads what Stats does of CPU time and peak memory, once a
	// process has used some in the cgroup.
	busy := exec.Command("sh", "-c", "read x; dd if=/dev/zero of=/dev/null bs=1M count=64 2>/dev/null")
	in, err := busy.StdinPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := busy.Start(); err != nil {
		t.Fatal(err)
	}
	if err := c.Attach(busy.Process.Pid); err != nil {
		t.Fatal(err)
	}
	in.Write([]byte("go\n"))
	if err := busy.Wait(); err != nil {
		t.Fatal(err)
	}
	st, err := c.Stats()
	if err != nil {
		t.Fatal(err)
	}
	u, err := c.Usage()
	if err != nil || u.CPUUsageNs < st.CPUUsageNs || u.MemoryPeakBytes != st.MemoryPeakBytes || u.MemoryPeakBytes == 0 || u.CPUUsageNs == 0 {
		t.Fatalf("usage %+v (%v) after stats %+v", u, err, st)
	}
	if err := c.Kill(); err != nil {
		t.Fatal(err)
	}
	if procs, _ := c.Procs(); len(procs) != 0 {
		t.Fatalf("after Kill: %v", procs)
	}
	if err := c.Remove(); err != nil || c.Exists() {
		t.Fatalf("remove: %v, exists %v", err, c.Exists())
	}
}

// childLiveV2 drives Nest, MakeChild, Attach and Kill on the cgroup2
// hierarchy (on a hybrid host the unified mount, which has no controller,
// so limits are set only where the controller is there).
func childLiveV2(t *testing.T, l *Layout) {
	if l.Unified == nil {
		t.Fatal("needs a cgroup2 hierarchy (v2 or hybrid host)")
	}
	p := l.Paths(fmt.Sprintf("/shoal-child-test-v2-%d", os.Getpid()))
	p.V2 = true
	if err := os.Mkdir(p.Unified, 0o755); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { Paths{Unified: p.Unified, V2: true}.Remove() })
	own := startIn(t, p.Unified)
	if err := p.Nest(); err != nil {
		t.Fatal(err)
	}
	if procs := readFile(t, filepath.Join(p.Unified, "cgroup.procs")); procs != "" {
		t.Fatalf("after Nest the parent holds %q", procs)
	}
	if leaf, _ := p.Child(NestLeaf).Procs(); !slices.Contains(leaf, own) {
		t.Fatalf("after Nest the leaf holds %v, want %d", leaf, own)
	}
	var lim ChildLimits
	ctls := readFile(t, filepath.Join(p.Unified, "cgroup.subtree_control"))
	if strings.Contains(ctls, "memory") {
		lim.MemoryBytes = 64 << 20
	}
	if strings.Contains(ctls, "pids") {
		lim.Pids = 16
	}
	c, err := p.MakeChild("step1", lim)
	if err != nil {
		t.Fatal(err)
	}
	if lim.Pids > 0 {
		if got := readFile(t, filepath.Join(c.Unified, "pids.max")); got != "16" {
			t.Fatalf("pids.max %s", got)
		}
	}
	pid := startIn(t, "")
	if err := c.Attach(pid); err != nil {
		t.Fatal(err)
	}
	if procs, _ := c.Procs(); !slices.Contains(procs, pid) {
		t.Fatalf("procs %v, want %d", procs, pid)
	}
	if err := c.Kill(); err != nil {
		t.Fatal(err)
	}
	if procs, _ := c.Procs(); len(procs) != 0 {
		t.Fatalf("after Kill: %v", procs)
	}
	if leaf, _ := p.Child(NestLeaf).Procs(); !slices.Contains(leaf, own) {
		t.Fatalf("Kill of the child reached its parent's own process: leaf %v", leaf)
	}
	if err := c.Remove(); err != nil {
		t.Fatal(err)
	}
}

// setLimitsV1 changes a v1 child's limits (made as old) up, lifted and
// down, and reads each back, memory and swap together with memory alone.
func setLimitsV1(t *testing.T, c Paths, old ChildLimits) {
	t.Helper()
	mem := c.V1["memory"]
	_, err := os.Stat(filepath.Join(mem, "memory.memsw.limit_in_bytes"))
	memsw := err == nil
	unlimited := readFile(t, filepath.Join(filepath.Dir(mem), "memory.limit_in_bytes"))
	for _, l := range []ChildLimits{
		{MemoryBytes: 128 << 20, Pids: 32, CPUs: 1},
		{},
		{MemoryBytes: 32 << 20, Pids: 8, CPUs: 0.25},
		{MemoryBytes: 16 << 20, Pids: 8, CPUs: 0.25},
	} {
		if err := c.SetLimits(old, l); err != nil {
			t.Fatalf("%+v to %+v: %v", old, l, err)
		}
		wantMem, wantPids, wantQuota := unlimited, "max", "-1"
		if l.MemoryBytes > 0 {
			wantMem = strconv.FormatInt(l.MemoryBytes, 10)
		}
		if l.Pids > 0 {
			wantPids = strconv.FormatInt(l.Pids, 10)
		}
		if l.CPUs > 0 {
			wantQuota = strconv.FormatInt(QuotaUs(l.CPUs, DefaultPeriodUs), 10)
		}
		got := []string{readFile(t, filepath.Join(mem, "memory.limit_in_bytes")), readFile(t, filepath.Join(c.V1["pids"], "pids.max")),
			readFile(t, filepath.Join(c.V1["cpu"], "cpu.cfs_quota_us"))}
		if want := []string{wantMem, wantPids, wantQuota}; !slices.Equal(got, want) {
			t.Fatalf("%+v to %+v: memory, pids, quota %v, want %v", old, l, got, want)
		}
		if memsw {
			if got := readFile(t, filepath.Join(mem, "memory.memsw.limit_in_bytes")); got != wantMem {
				t.Fatalf("%+v to %+v: memory and swap %s, want %s", old, l, got, wantMem)
			}
		}
		old = l
	}
	if err := c.SetLimits(old, ChildLimits{MemoryBytes: 64 << 20, Pids: 16, CPUs: 0.5}); err != nil {
		t.Fatal(err)
	}
}

// TestKillFreezeFails: on v1, a cgroup that cannot be frozen still has its
// processes killed (the freeze only keeps them from forking meanwhile),
// and Kill says it failed.
func TestKillFreezeFails(t *testing.T) {
	root := t.TempDir()
	p := Paths{V1: map[string]string{"pids": filepath.Join(root, "pids"), "freezer": filepath.Join(root, "freezer")}}
	// A freezer.state that cannot be written: the freeze fails.
	if err := os.MkdirAll(filepath.Join(root, "freezer", "freezer.state"), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.Mkdir(filepath.Join(root, "pids"), 0o755); err != nil {
		t.Fatal(err)
	}
	c := exec.Command("sleep", "1000")
	if err := c.Start(); err != nil {
		t.Fatal(err)
	}
	reaped := false
	defer func() {
		if !reaped {
			c.Process.Kill()
			c.Wait()
		}
	}()
	if err := os.WriteFile(filepath.Join(root, "pids", "cgroup.procs"), []byte(strconv.Itoa(c.Process.Pid)+"\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := p.Kill(); err == nil {
		t.Fatal("Kill: no error though the cgroup could not be frozen or thawed")
	}
	var ws syscall.WaitStatus
	until(t, "the cgroup's process killed", func() bool {
		pid, _ := syscall.Wait4(c.Process.Pid, &ws, syscall.WNOHANG, nil)
		reaped = pid == c.Process.Pid
		return reaped
	})
	if !ws.Signaled() || ws.Signal() != syscall.SIGKILL {
		t.Fatalf("the cgroup's process ended with %v, want killed", ws)
	}
}
