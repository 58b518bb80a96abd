package runtime

import (
	"math"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/shoal-run/shoal/internal/errdefs"
)

func TestOOMKill(t *testing.T) {
	r := newTestRuntime(t, nil)
	s := baseSpec(t, "sh", "-c", `x=a; while true; do x="$x$x"; done`)
	s.Limits.MemoryBytes = 16 << 20
	st, _, _ := capture(t, r, s)
	if !st.OOMKilled || st.Code != 137 || st.Signal != syscall.SIGKILL {
		t.Fatalf("status %+v, want OOMKilled with code 137", st)
	}
}

// TestOOMChildInitExitsZero checks the OOMKilled rule: a process other than
// init is OOM-killed, init exits 0, and the container is not reported as
// OOM-killed, though the kill is counted.
func TestOOMChildInitExitsZero(t *testing.T) {
	r := newTestRuntime(t, nil)
	s := baseSpec(t, "sh", "-c", "tail /dev/zero; exit 0")
	s.Limits.MemoryBytes = 16 << 20
	st, _, errOut := capture(t, r, s)
	if st.OOMKilled || st.Code != 0 || st.Signal != 0 || !st.Known {
		t.Fatalf("status %+v (stderr %q), want exit 0 without OOMKilled", st, errOut)
	}
	stats, err := r.Stats(s.ID)
	if err != nil {
		t.Fatal(err)
	}
	if stats.OOMKills == 0 {
		t.Fatalf("stats %+v: the OOM kill of tail was not counted", stats)
	}
}

func TestPidsLimit(t *testing.T) {
	r := newTestRuntime(t, nil)
	// A fork loop: each round starts a sleeper and reports how many
	// processes the pid namespace has (a glob, so no fork is needed to count).
	s := baseSpec(t, "sh", "-c", `i=0; while [ $i -lt 100 ]; do sleep 30 & set -- /proc/[0-9]*; echo $#; i=$((i+1)); done`)
	s.Limits.Pids = 16
	st, out, errOut := capture(t, r, s)
	lines := strings.Fields(out)
	if len(lines) == 0 || st.Code == 0 || !strings.Contains(errOut, "fork") {
		t.Fatalf("status %+v, stdout %q, stderr %q: want the fork loop stopped by the pids limit", st, out, errOut)
	}
	if n, _ := strconv.Atoi(lines[len(lines)-1]); n > 16 {
		t.Fatalf("%d processes under a limit of 16", n)
	}
}

func TestCPUQuotaFreezeStatsUpdate(t *testing.T) {
	r := newTestRuntime(t, nil)
	counter := filepath.Join(t.TempDir(), "counter")
	if err := os.WriteFile(counter, nil, 0o666); err != nil {
		t.Fatal(err)
	}
	// A counter the test reads through a mount, and a busy loop that wants
	// a whole core.
	s := baseSpec(t, "sh", "-c", `(while :; do :; done) & i=0; while true; do i=$((i+1)); echo $i > /out/n; done`)
	s.Mounts = []Mount{{Source: filepath.Dir(counter), Destination: "/out"}}
	s.Limits.CPUs = 0.5
	s.Limits.CPUShares = 512
	c := run(t, r, s)
	if c.Status != StatusRunning || c.Pid <= 0 {
		t.Fatalf("container %+v", c)
	}
	paths := r.cgroupPaths(s.ID)
	quota, period, err := paths.CPUQuota()
	if err != nil || quota != 50000 || period != 100000 {
		t.Fatalf("cpu quota %d/%d (%v), want 50000/100000", quota, period, err)
	}
	// Shares land in cpu.shares on v1; on v2 the runtime maps them onto
	// cpu.weight (1 + (shares-2)*9999/262142).
	sharesFile, wantShares := filepath.Join(paths.V1["cpu"], "cpu.shares"), "512"
	if paths.V2 {
		sharesFile, wantShares = filepath.Join(paths.Unified, "cpu.weight"), strconv.Itoa(1+(512-2)*9999/262142)
	}
	if b, err := os.ReadFile(sharesFile); err != nil || strings.TrimSpace(string(b)) != wantShares {
		t.Fatalf("%s = %q (%v), want %s", sharesFile, b, err, wantShares)
	}
	read := func() int {
		b, _ := os.ReadFile(filepath.Join(filepath.Dir(counter), "n"))
		n, _ := strconv.Atoi(strings.TrimSpace(string(b)))
		return n
	}
	eventually(t, "counter advances", func() bool { return read() > 10 })
	// Under the smallest quota (MinCPUs: the kernel's minimum of 1ms a
	// period) the kernel throttles the container however little CPU a
	// loaded host gives it; a busy container on such a host may never get
	// the half core it was given, and so never be throttled under it.
	if err := r.UpdateCPU(s.ID, MinCPUs); err != nil {
		t.Fatal(err)
	}
	if quota, period, err := r.cgroupPaths(s.ID).CPUQuota(); err != nil || quota != 1000 || period != 100000 {
		t.Fatalf("cpu quota %d/%d (%v) at %g cpus, want 1000/100000", quota, period, err, MinCPUs)
	}
	eventually(t, "CPU throttled under the minimum quota", func() bool {
		st, err := r.Stats(s.ID)
		return err == nil && st.NrThrottled > 0 && st.ThrottledNs > 0
	})
	if err := r.UpdateCPU(s.ID, 0.5); err != nil {
		t.Fatal(err)
	}
	if quota, _, _ := r.cgroupPaths(s.ID).CPUQuota(); quota != 50000 {
		t.Fatalf("quota back at 0.5 cpus %d, want 50000", quota)
	}

	if err := r.Freeze(s.ID); err != nil {
		t.Fatal(err)
	}
	if got, _ := r.Get(s.ID); got.Status != StatusPaused {
		t.Fatalf("status %q after freeze", got.Status)
	}
	frozenAt := read()
	// Frozen tasks run nothing: many reads later the value is the same.
	for i := 0; i < 20; i++ {
		time.Sleep(10 * time.Millisecond)
		if n := read(); n != frozenAt && n != 0 {
			t.Fatalf("counter moved from %d to %d while frozen", frozenAt, n)
		}
	}
	if err := r.Thaw(s.ID); err != nil {
		t.Fatal(err)
	}
	eventually(t, "counter resumes", func() bool { return read() > frozenAt+10 })

	if err := r.UpdateCPU(s.ID, 1.5); err != nil {
		t.Fatal(err)
	}
	if quota, _, _ := r.cgroupPaths(s.ID).CPUQuota(); quota != 150000 {
		t.Fatalf("quota after update %d, want 150000", quota)
	}
	st, err := r.Stats(s.ID)
	if err != nil {
		t.Fatal(err)
	}
	if st.CPUUsageNs == 0 || st.MemoryBytes == 0 || st.MemoryPeakBytes == 0 || st.Pids == 0 || st.NrPeriods == 0 {
		t.Fatalf("stats %+v: want nonzero usage", st)
	}
	for _, bad := range []float64{0.001, -1, math.NaN(), math.Inf(1), MaxCPUs + 1} {
		if err := r.UpdateCPU(s.ID, bad); !errdefs.IsInvalid(err) || errdefs.Field(err) != "cpus" {
			t.Fatalf("UpdateCPU(%g): %v, want invalid cpus", bad, err)
		}
	}
	if quota, _, _ := paths.CPUQuota(); quota != 150000 {
		t.Fatalf("quota %d after refused updates, want 150000", quota)
	}
}

// A container pinned to one CPU runs there only (its cgroup's cpuset and
// the affinity its processes see), and its CPU quota still rises live.
func TestCPUSetPinned(t *testing.T) {
	r := newTestRuntime(t, nil)
	if !r.CPUSetSupported() {
		t.Fatal("the cpuset controller is not available on this host")
	}
	cpu := strconv.Itoa(runtimeCPUs(t) - 1) // the last CPU, not the first a default would give
	s := baseSpec(t, "sleep", "300")
	s.Limits.CPUSet, s.Limits.CPUs = cpu, 0.5
	run(t, r, s)
	if got, err := r.CPUSet(s.ID); err != nil || got != cpu {
		t.Fatalf("cgroup cpuset %q, %v; want %q", got, err, cpu)
	}
	var out strings.Builder
	if _, err := r.Exec(t.Context(), s.ID, ExecSpec{Args: []string{"grep", "Cpus_allowed_list", "/proc/1/status"}, Stdout: &out}); err != nil {
		t.Fatal(err)
	}
	if f := strings.Fields(out.String()); len(f) != 2 || f[1] != cpu {
		t.Fatalf("container's init: %q, want Cpus_allowed_list %s", out.String(), cpu)
	}
	if err := r.UpdateCPU(s.ID, 1); err != nil {
		t.Fatalf("raise the quota of a pinned container: %v", err)
	}
	if q, p, err := r.cgroupPaths(s.ID).CPUQuota(); err != nil || q != p {
		t.Fatalf("quota %d over period %d (%v), want one core", q, p, err)
	}
}

// A CPU list that is not one is refused, naming the field.
func TestCPUSetInvalid(t *testing.T) {
	r := newTestRuntime(t, nil)
	for _, bad := range []string{"a", "1-", "0,,1", " 1"} {
		s := baseSpec(t, "true")
		s.Limits.CPUSet = bad
		if _, err := r.Run(t.Context(), s); !errdefs.IsInvalid(err) || errdefs.Field(err) != "limits.cpuset" {
			t.Fatalf("cpuset %q: %v, want an invalid limits.cpuset", bad, err)
		}
	}
}

// runtimeCPUs is the number of CPUs this test may use; pinning needs two.
func runtimeCPUs(t *testing.T) int {
	t.Helper()
	n := 0
	b, err := os.ReadFile("/proc/self/status")
	if err != nil {
		t.Fatal(err)
	}
	for _, l := range strings.Split(string(b), "\n") {
		if v, ok := strings.CutPrefix(l, "Cpus_allowed_list:"); ok {
			for _, part := range strings.Split(strings.TrimSpace(v), ",") {
				lo, hi, isRange := strings.Cut(part, "-")
				a, _ := strconv.Atoi(lo)
				b := a
				if isRange {
					b, _ = strconv.Atoi(hi)
				}
				n += b - a + 1
			}
		}
	}
	if n < 2 {
		t.Fatalf("%d CPUs: pinning needs two", n)
	}
	return n
}
