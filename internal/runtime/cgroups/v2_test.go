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
	"time"
)

// TestV2Live drives the cgroup v2 code on the host's real cgroup2 hierarchy
// (the unified mount of a hybrid host, or the only one on a v2 host) with a
// busy process in a fresh cgroup. The freezer and cpu.stat work there
// without any controller enabled.
func TestV2Live(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Fatal("needs root to make cgroups")
	}
	l, err := ReadLayout()
	if err != nil {
		t.Fatal(err)
	}
	if l.Unified == nil {
		t.Fatal("needs a cgroup2 hierarchy (v2 or hybrid host)")
	}
	rel := fmt.Sprintf("/shoal-cgroups-test-%d", os.Getpid())
	p := l.Paths(rel)
	p.V2 = true // use the v2 files even on a hybrid host
	if p.Unified != filepath.Join(l.Unified.Point, rel) {
		t.Fatalf("unified dir %q", p.Unified)
	}
	if err := os.Mkdir(p.Unified, 0o755); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = Paths{Unified: p.Unified, V2: true}.Remove() })

	busy := exec.Command("sh", "-c", "while :; do :; done")
	if err := busy.Start(); err != nil {
		t.Fatal(err)
	}
	waited := false
	t.Cleanup(func() {
		if !waited {
			_ = busy.Process.Kill()
			_ = busy.Wait()
		}
	})
	pid := busy.Process.Pid
	if err := os.WriteFile(filepath.Join(p.Unified, "cgroup.procs"), []byte(strconv.Itoa(pid)), 0); err != nil {
		t.Fatal(err)
	}
	if procs, err := p.Procs(); err != nil || !slices.Contains(procs, pid) {
		t.Fatalf("procs %v (%v), want %d", procs, err, pid)
	}
	if !p.Exists() {
		t.Fatal("Exists is false")
	}
	events := func() string {
		b, _ := os.ReadFile(filepath.Join(p.Unified, "cgroup.events"))
		return string(b)
	}
	usage := func() uint64 {
		s, err := p.Stats()
		if err != nil {
			t.Fatal(err)
		}
		return s.CPUUsageNs
	}
	until(t, "CPU usage counted", func() bool { return usage() > 0 })
	if f, err := p.Frozen(); err != nil || f {
		t.Fatalf("frozen before Freeze: %v %v", f, err)
	}

	if err := p.Freeze(); err != nil {
		t.Fatal(err)
	}
	if f, err := p.Frozen(); err != nil || !f || !strings.Contains(events(), "frozen 1") {
		t.Fatalf("after Freeze: frozen %v (%v), cgroup.events %q", f, err, events())
	}
	// A frozen busy loop uses no CPU: the counter stays put across reads.
	before := usage()
	for i := 0; i < 10; i++ {
		time.Sleep(10 * time.Millisecond)
		if u := usage(); u != before {
			t.Fatalf("CPU usage moved from %d to %d while frozen", before, u)
		}
	}
	// Freezing a frozen cgroup is a no-op.
	if err := p.Freeze(); err != nil {
		t.Fatal(err)
	}

	if err := p.Thaw(); err != nil {
		t.Fatal(err)
	}
	if f, err := p.Frozen(); err != nil || f || !strings.Contains(events(), "frozen 0") {
		t.Fatalf("after Thaw: frozen %v (%v), cgroup.events %q", f, err, events())
	}
	until(t, "CPU usage resumes", func() bool { return usage() > before })

	// Without the cpu controller there is no cpu.max: a clear error.
	if err := p.SetCPUs(0.5); err == nil || !strings.Contains(err.Error(), "cpu.max") {
		t.Fatalf("SetCPUs without the cpu controller: %v", err)
	}

	// Remove kills what is inside (here, a frozen process too) and removes
	// the directory.
	if err := p.Freeze(); err != nil {
		t.Fatal(err)
	}
	if err := p.Remove(); err != nil {
		t.Fatal(err)
	}
	err = busy.Wait()
	waited = true
	if ws, ok := busy.ProcessState.Sys().(syscall.WaitStatus); !ok || !ws.Signaled() || ws.Signal() != syscall.SIGKILL {
		t.Fatalf("busy process ended with %v, want SIGKILL", err)
	}
	if p.Exists() {
		t.Fatalf("%s still exists", p.Unified)
	}
}

// until polls a condition the kernel reaches asynchronously.
func until(t *testing.T, what string, cond func() bool) {
	t.Helper()
	for i := 0; i < 500; i++ {
		if cond() {
			return
		}
		time.Sleep(10 * time.Millisecond)
	}
	t.Fatalf("%s: condition not reached", what)
}
