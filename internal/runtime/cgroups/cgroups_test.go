package cgroups

import (
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"
)

func layoutFrom(t *testing.T, name string) *Layout {
	t.Helper()
	f, err := os.Open(filepath.Join("testdata", name))
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	l, err := ParseMountinfo(f)
	if err != nil {
		t.Fatal(err)
	}
	return l
}

func TestParseMountinfo(t *testing.T) {
	tests := []struct {
		file   string
		mode   string
		path   string
		want   map[string]string // controller -> dir; "" = unified
		noUnif bool
	}{
		{file: "mountinfo-hybrid", mode: ModeHybrid, path: "/shoal/a", want: map[string]string{
			"cpu": "/sys/fs/cgroup/cpu/shoal/a", "cpuacct": "/sys/fs/cgroup/cpuacct/shoal/a",
			"memory": "/sys/fs/cgroup/memory/shoal/a", "freezer": "/sys/fs/cgroup/freezer/shoal/a",
			"pids": "/sys/fs/cgroup/pids/shoal/a", "name=systemd": "/sys/fs/cgroup/systemd/shoal/a",
			"": "/sys/fs/cgroup/unified/shoal/a",
		}},
		{file: "mountinfo-v2", mode: ModeV2, path: "/shoal/b", want: map[string]string{"": "/sys/fs/cgroup/shoal/b"}},
		{file: "mountinfo-v1ns", mode: ModeV1, path: "/kube/shoal/c", noUnif: true, want: map[string]string{
			"cpu": "/sys/fs/cgroup/cpu,cpuacct/shoal/c", "cpuacct": "/sys/fs/cgroup/cpu,cpuacct/shoal/c",
			"memory": "/sys/fs/cgroup/memory/shoal/c", "freezer": "/sys/fs/cgroup/freezer/kube/shoal/c",
			"name=systemd": "/sys/fs/cgroup/with space/kube/shoal/c",
		}},
	}
	for _, tc := range tests {
		t.Run(tc.file, func(t *testing.T) {
			l := layoutFrom(t, tc.file)
			if got := l.Mode(); got != tc.mode {
				t.Fatalf("mode = %q, want %q", got, tc.mode)
			}
			p := l.Paths(tc.path)
			if p.V2 != (tc.mode == ModeV2) {
				t.Fatalf("V2 = %v", p.V2)
			}
			for c, want := range tc.want {
				got := p.Unified
				if c != "" {
					got = p.V1[c]
				}
				if got != want {
					t.Errorf("%q: got %q, want %q", c, got, want)
				}
			}
			if tc.noUnif && p.Unified != "" {
				t.Errorf("unexpected unified dir %q", p.Unified)
			}
		})
	}
}

func TestProcessCgroup(t *testing.T) {
	in := "9:name=systemd:/\n4:memory:/process_api/x\n2:cpu,cpuacct:/shoal/a\n0::/shoal/a\n"
	m, err := ProcessCgroup(strings.NewReader(in))
	if err != nil {
		t.Fatal(err)
	}
	if m["cpu"] != "/shoal/a" || m["cpuacct"] != "/shoal/a" || m[""] != "/shoal/a" || m["memory"] != "/process_api/x" {
		t.Fatalf("got %v", m)
	}
}

// fixture copies a testdata tree to a temp dir so tests may write to it.
func fixture(t *testing.T, name string) string {
	t.Helper()
	dst := t.TempDir()
	src := filepath.Join("testdata", name)
	err := filepath.Walk(src, func(p string, info os.FileInfo, err error) error {
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(src, p)
		if info.IsDir() {
			return os.MkdirAll(filepath.Join(dst, rel), 0o755)
		}
		b, err := os.ReadFile(p)
		if err != nil {
			return err
		}
		return os.WriteFile(filepath.Join(dst, rel), b, 0o644)
	})
	if err != nil {
		t.Fatal(err)
	}
	return dst
}

func v1Paths(root string) Paths {
	p := Paths{V1: map[string]string{}}
	for _, c := range []string{"cpu", "cpuacct", "memory", "pids", "freezer"} {
		p.V1[c] = filepath.Join(root, c)
	}
	return p
}

func TestStatsV1(t *testing.T) {
	p := v1Paths(fixture(t, "v1"))
	s, err := p.Stats()
	if err != nil {
		t.Fatal(err)
	}
	want := Stats{CPUUsageNs: 987654321, NrPeriods: 120, NrThrottled: 7, ThrottledNs: 3500000,
		MemoryBytes: 4096000, MemoryPeakBytes: 8192000, OOMKills: 2, Pids: 5}
	if s != want {
		t.Fatalf("got %+v\nwant %+v", s, want)
	}
	if p.OOMKills() != 2 {
		t.Fatalf("OOMKills = %d", p.OOMKills())
	}
}

func TestStatsV2(t *testing.T) {
	p := Paths{Unified: fixture(t, "v2"), V2: true}
	s, err := p.Stats()
	if err != nil {
		t.Fatal(err)
	}
	want := Stats{CPUUsageNs: 1500000, NrPeriods: 40, NrThrottled: 4, ThrottledNs: 250000,
		MemoryBytes: 2097152, MemoryPeakBytes: 3145728, OOMKills: 1, Pids: 3}
	if s != want {
		t.Fatalf("got %+v\nwant %+v", s, want)
	}
}

func TestSetCPUs(t *testing.T) {
	v1 := v1Paths(fixture(t, "v1"))
	if err := v1.SetCPUs(0.5); err != nil {
		t.Fatal(err)
	}
	if q, per, err := v1.CPUQuota(); err != nil || q != 50000 || per != 100000 {
		t.Fatalf("v1 quota %d/%d %v", q, per, err)
	}
	if err := v1.SetCPUs(0); err != nil {
		t.Fatal(err)
	}
	if q, _, _ := v1.CPUQuota(); q != -1 {
		t.Fatalf("v1 unlimited quota = %d", q)
	}
	v2 := Paths{Unified: fixture(t, "v2"), V2: true}
	if err := v2.SetCPUs(1.25); err != nil {
		t.Fatal(err)
	}
	if b, _ := os.ReadFile(filepath.Join(v2.Unified, "cpu.max")); string(b) != "125000 100000" {
		t.Fatalf("cpu.max = %q", b)
	}
	if err := v2.SetCPUs(-1); err != nil {
		t.Fatal(err)
	}
	if q, per, err := v2.CPUQuota(); err != nil || q != -1 || per != 100000 {
		t.Fatalf("v2 quota %d/%d %v", q, per, err)
	}
	if QuotaUs(0.001, 100000) != 1000 {
		t.Fatal("quota below kernel minimum not raised")
	}
}

func TestFreezeFiles(t *testing.T) {
	v1 := v1Paths(fixture(t, "v1"))
	if err := v1.Freeze(); err != nil {
		t.Fatal(err)
	}
	if f, _ := v1.Frozen(); !f {
		t.Fatal("v1 not frozen")
	}
	if err := v1.Thaw(); err != nil {
		t.Fatal(err)
	}
	if f, _ := v1.Frozen(); f {
		t.Fatal("v1 still frozen")
	}
	// The kernel updates cgroup.events itself; emulate an already-frozen
	// cgroup so the write-then-wait path is exercised.
	v2 := Paths{Unified: fixture(t, "v2"), V2: true}
	if err := os.WriteFile(filepath.Join(v2.Unified, "cgroup.events"), []byte("populated 1\nfrozen 1\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := v2.Freeze(); err != nil {
		t.Fatal(err)
	}
	if b, _ := os.ReadFile(filepath.Join(v2.Unified, "cgroup.freeze")); string(b) != "1" {
		t.Fatalf("cgroup.freeze = %q", b)
	}
	if f, _ := v2.Frozen(); !f {
		t.Fatal("v2 not frozen")
	}
}

// TestThawed: only a thawed cgroup is thawed; one being frozen (v1's
// FREEZING, v2's cgroup.freeze 1 before frozen 1) is not, nor a frozen one.
func TestThawed(t *testing.T) {
	v1 := v1Paths(fixture(t, "v1"))
	for state, want := range map[string]bool{"THAWED\n": true, "FREEZING\n": false, "FROZEN\n": false} {
		if err := os.WriteFile(filepath.Join(v1.V1["freezer"], "freezer.state"), []byte(state), 0o644); err != nil {
			t.Fatal(err)
		}
		if got, err := v1.Thawed(); err != nil || got != want {
			t.Errorf("v1 %q: Thawed() = %v, %v; want %v", state, got, err, want)
		}
	}
	v2 := Paths{Unified: fixture(t, "v2"), V2: true}
	for freeze, want := range map[string]bool{"0\n": true, "1\n": false} {
		if err := os.WriteFile(filepath.Join(v2.Unified, "cgroup.freeze"), []byte(freeze), 0o644); err != nil {
			t.Fatal(err)
		}
		if got, err := v2.Thawed(); err != nil || got != want {
			t.Errorf("v2 cgroup.freeze %q: Thawed() = %v, %v; want %v", freeze, got, err, want)
		}
	}
	if _, err := (Paths{V1: map[string]string{}}).Thawed(); err == nil {
		t.Error("Thawed() without a freezer: no error")
	}
}

func TestRemoveMissing(t *testing.T) {
	p := Paths{V1: map[string]string{"cpu": filepath.Join(t.TempDir(), "nope")}}
	if err := p.Remove(); err != nil {
		t.Fatal(err)
	}
	if p.Exists() {
		t.Fatal("exists")
	}
}

// CPUUse reads the same CFS counters and CPU time as Stats, from cpu.stat
// (and cpuacct.usage on v1), and the "some" total of cpu.pressure where
// the cgroup2 hierarchy has the cgroup: on v2, and on a hybrid host.
func TestCPUUse(t *testing.T) {
	hybrid := v1Paths(fixture(t, "v1"))
	hybrid.Unified = fixture(t, "v2")
	for name, tc := range map[string]struct {
		p        Paths
		pressure bool
	}{
		"v1":                 {v1Paths(fixture(t, "v1")), false},
		"v1 without cgroup2": {Paths{V1: v1Paths(fixture(t, "v1")).V1, Unified: filepath.Join(t.TempDir(), "nope")}, false},
		"hybrid":             {hybrid, true},
		"v2":                 {Paths{Unified: fixture(t, "v2"), V2: true}, true},
	} {
		s, err := tc.p.Stats()
		if err != nil {
			t.Fatal(err)
		}
		u, err := tc.p.CPUUse()
		if err != nil || u.Periods != s.NrPeriods || u.Throttled != s.NrThrottled || u.Used != time.Duration(s.CPUUsageNs) || u.Periods == 0 || u.Throttled == 0 || u.Used == 0 {
			t.Errorf("%s: CPUUse = %+v, %v; Stats says %d, %d, %d ns", name, u, err, s.NrPeriods, s.NrThrottled, s.CPUUsageNs)
		}
		if want := 2500 * time.Millisecond; u.Pressure != tc.pressure || (tc.pressure && u.Stalled != want) {
			t.Errorf("%s: pressure %v, stalled %s; want %v, %s", name, u.Pressure, u.Stalled, tc.pressure, want)
		}
	}
	if u, err := (Paths{V1: map[string]string{}}).CPUUse(); u != (CPUUse{}) || err != nil {
		t.Errorf("no cpu controller: %+v, %v", u, err)
	}
}

// TestTasksOf: a freeze that did not end names each task of the cgroup
// and its children with its state and where it sleeps.
func TestTasksOf(t *testing.T) {
	d := t.TempDir()
	if err := os.MkdirAll(filepath.Join(d, "step"), 0o755); err != nil {
		t.Fatal(err)
	}
	self := strconv.Itoa(os.Getpid())
	if err := os.WriteFile(filepath.Join(d, "step", "tasks"), []byte(self+"\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	comm, _ := os.ReadFile("/proc/self/comm")
	got := tasksOf(d)
	if !strings.HasPrefix(got, "tasks: "+self+" "+strings.TrimSpace(string(comm))+" ") {
		t.Errorf("tasksOf = %q; want this process's pid and comm", got)
	}
	if got := tasksOf(t.TempDir()); got != "no task" {
		t.Errorf("tasksOf an empty cgroup = %q", got)
	}
}
