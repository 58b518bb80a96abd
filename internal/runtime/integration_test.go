package runtime

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/opencontainers/runtime-spec/specs-go"

	"github.com/shoal-run/shoal/internal/errdefs"
)

func TestEchoAndExitCodes(t *testing.T) {
	r := newTestRuntime(t, nil)
	st, out, _ := capture(t, r, baseSpec(t, "echo", "hi"))
	if out != "hi\n" || st.Code != 0 || !st.Known {
		t.Fatalf("echo hi: status %+v, stdout %q", st, out)
	}
	st, _, _ = capture(t, r, baseSpec(t, "sh", "-c", "exit 3"))
	if st.Code != 3 || st.Signal != 0 || !st.Known {
		t.Fatalf("exit 3: status %+v", st)
	}
	// The init of a pid namespace ignores signals it has no handler for,
	// except SIGKILL from outside.
	s := baseSpec(t, "sleep", "300")
	run(t, r, s)
	if err := r.Signal(s.ID, syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	if st := wait(t, r, s.ID); st.Code != 137 || st.Signal != syscall.SIGKILL || st.OOMKilled {
		t.Fatalf("SIGKILL: status %+v", st)
	}
	if err := r.Signal(s.ID, syscall.SIGTERM); err == nil {
		t.Fatal("signal to an exited container succeeded")
	}
}

func TestStdinEnvUserCwd(t *testing.T) {
	r := newTestRuntime(t, nil)
	s := baseSpec(t, "sh", "-c", `read line; echo "$line $FOO $(id -u):$(id -g) $(id -G) $(pwd) $HOME $(hostname)"`)
	s.Stdin = strings.NewReader("from-stdin\n")
	s.Env = []string{"FOO=bar"}
	s.User = "app"
	s.Cwd = "/tmp"
	s.Hostname = "box"
	_, out, errOut := capture(t, r, s)
	want := "from-stdin bar 1000:1000 1000 50 /tmp /home/app box\n"
	if out != want {
		t.Fatalf("got %q (stderr %q), want %q", out, errOut, want)
	}
	s = baseSpec(t, "id", "-u")
	s.User = "nobody-here"
	if _, err := r.Run(context.Background(), s); !errdefs.IsInvalid(err) || errdefs.Field(err) != "user" {
		t.Fatalf("unknown user: got %v, want invalid user", err)
	}
	assertGone(t, r, s.ID)
}

func TestOOMKill(t *testing.T) {
	r := newTestRuntime(t, nil)
	s := baseSpec(t, "sh", "-c", `x=a; while true; do x="$x$x"; done`)
	s.Limits.MemoryBytes = 16 << 20
	st, _, _ := capture(t, r, s)
	if !st.OOMKilled || st.Code != 137 || st.Signal != syscall.SIGKILL {
		t.Fatalf("status %+v, want OOMKilled with code 137", st)
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
	s := baseSpec(t, "sh", "-c", `i=0; while true; do i=$((i+1)); echo $i > /out/n; done`)
	s.Mounts = []Mount{{Source: filepath.Dir(counter), Destination: "/out"}}
	s.Limits.CPUs = 0.5
	c := run(t, r, s)
	if c.Status != StatusRunning || c.Pid <= 0 {
		t.Fatalf("container %+v", c)
	}
	quota, period, err := r.cgroupPaths(s.ID).CPUQuota()
	if err != nil || quota != 50000 || period != 100000 {
		t.Fatalf("cpu quota %d/%d (%v), want 50000/100000", quota, period, err)
	}
	read := func() int {
		b, _ := os.ReadFile(filepath.Join(filepath.Dir(counter), "n"))
		n, _ := strconv.Atoi(strings.TrimSpace(string(b)))
		return n
	}
	eventually(t, "counter advances", func() bool { return read() > 10 })

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
	if st.CPUUsageNs == 0 || st.MemoryBytes == 0 || st.Pids == 0 {
		t.Fatalf("stats %+v: want nonzero usage", st)
	}
	if err := r.UpdateCPU(s.ID, 0.001); !errdefs.IsInvalid(err) {
		t.Fatalf("tiny quota: %v", err)
	}
}

func TestStopGraceThenKill(t *testing.T) {
	r := newTestRuntime(t, nil)
	ready := filepath.Join(t.TempDir(), "ready")
	s := baseSpec(t, "sh", "-c", `trap "echo ignored" TERM; touch /out/ready; while true; do sleep 1; done`)
	s.Mounts = []Mount{{Source: filepath.Dir(ready), Destination: "/out"}}
	run(t, r, s)
	eventually(t, "trap installed", func() bool { _, err := os.Stat(ready); return err == nil })
	st, err := r.Stop(context.Background(), s.ID, 200*time.Millisecond)
	if err != nil {
		t.Fatal(err)
	}
	if st.Signal != syscall.SIGKILL || st.Code != 137 {
		t.Fatalf("status %+v, want SIGKILL", st)
	}
	// A process that honours TERM stops on it.
	ready2 := filepath.Join(t.TempDir(), "ready")
	s2 := baseSpec(t, "sh", "-c", `trap "exit 7" TERM; touch /out/ready; while true; do sleep 1; done`)
	s2.Mounts = []Mount{{Source: filepath.Dir(ready2), Destination: "/out"}}
	run(t, r, s2)
	eventually(t, "trap installed", func() bool { _, err := os.Stat(ready2); return err == nil })
	st, err = r.Stop(context.Background(), s2.ID, time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	if st.Code != 7 || st.Signal != 0 {
		t.Fatalf("status %+v, want exit 7 from the TERM trap", st)
	}
}

func TestExec(t *testing.T) {
	r := newTestRuntime(t, nil)
	s := baseSpec(t, "sleep", "300")
	s.Env = []string{"A=1"}
	run(t, r, s)
	var out strings.Builder
	st, err := r.Exec(context.Background(), s.ID, ExecSpec{
		Args: []string{"sh", "-c", `echo "$A $B $(id -u) $(pwd)"; exit 4`}, Env: []string{"B=2"},
		User: "app", Cwd: "/tmp", Stdout: &out,
	})
	if err != nil {
		t.Fatal(err)
	}
	if st.Code != 4 || out.String() != "1 2 1000 /tmp\n" {
		t.Fatalf("exec: status %+v, out %q", st, out.String())
	}
	// The exec joined the container's pid namespace: sleep is pid 1.
	out.Reset()
	if _, err := r.Exec(context.Background(), s.ID, ExecSpec{Args: []string{"cat", "/proc/1/cmdline"}, Stdout: &out}); err != nil {
		t.Fatal(err)
	}
	if !strings.HasPrefix(out.String(), "sleep") {
		t.Fatalf("pid 1 is %q", out.String())
	}
}

func TestSeccompAndReadOnlyRootfs(t *testing.T) {
	r := newTestRuntime(t, nil)
	s := baseSpec(t, "sh", "-c", `unshare -n true && echo unshare-ok; mount -t tmpfs x /mnt && echo mount-ok; echo done`)
	st, out, errOut := capture(t, r, s)
	if strings.Contains(out, "-ok") || !strings.Contains(out, "done") || st.Code != 0 {
		t.Fatalf("status %+v, out %q, stderr %q: unshare and mount must be refused", st, out, errOut)
	}
	if !strings.Contains(errOut, "Operation not permitted") {
		t.Fatalf("stderr %q: want EPERM", errOut)
	}
	// With CAP_SYS_ADMIN granted, the filter alone still refuses unshare and
	// mount; an allow-all filter lets the same commands through.
	admin := baseSpec(t, "sh", "-c", `unshare -m true && echo unshare-ok; mount -t tmpfs x /tmp && echo mount-ok; echo done`)
	admin.Capabilities = append(append([]string(nil), defaultCaps...), "CAP_SYS_ADMIN")
	_, out, errOut = capture(t, r, admin)
	if strings.Contains(out, "-ok") || !strings.Contains(errOut, "Operation not permitted") {
		t.Fatalf("default seccomp with SYS_ADMIN: out %q, stderr %q", out, errOut)
	}
	admin.ID = testID(t)
	admin.Seccomp = &specs.LinuxSeccomp{DefaultAction: specs.ActAllow}
	_, out, errOut = capture(t, r, admin)
	if !strings.Contains(out, "unshare-ok") || !strings.Contains(out, "mount-ok") {
		t.Fatalf("allow-all seccomp with SYS_ADMIN: out %q, stderr %q", out, errOut)
	}
	// Capability sets are the default minimal ones: CapEff has no SYS_ADMIN.
	_, out, _ = capture(t, r, baseSpec(t, "sh", "-c", `grep CapEff /proc/self/status; grep NoNewPrivs /proc/self/status; echo "nofile $(ulimit -n)"`))
	// CHOWN DAC_OVERRIDE FOWNER FSETID KILL SETGID SETUID SETPCAP
	// NET_BIND_SERVICE SYS_CHROOT MKNOD AUDIT_WRITE SETFCAP; no NET_RAW.
	if !strings.Contains(out, "CapEff:\t00000000a80405fb") {
		t.Fatalf("capabilities: %q", out)
	}
	var hostNofile syscall.Rlimit
	_ = syscall.Getrlimit(syscall.RLIMIT_NOFILE, &hostNofile)
	if want := fmt.Sprintf("nofile %d", min(hostNofile.Max, 1048576)); !strings.Contains(out, want) {
		t.Fatalf("%q: want %q", out, want)
	}
	if !strings.Contains(out, "NoNewPrivs:\t1") {
		t.Fatalf("no_new_privs not set: %q", out)
	}
	ro := baseSpec(t, "sh", "-c", `touch /x && echo wrote; touch /tmp/y && echo wrote-tmp; echo done`)
	ro.ReadOnlyRootfs = true
	st, out, errOut = capture(t, r, ro)
	if strings.Contains(out, "wrote") || !strings.Contains(errOut, "Read-only file system") {
		t.Fatalf("read-only rootfs: status %+v out %q stderr %q", st, out, errOut)
	}
}

func TestOverlayWhiteout(t *testing.T) {
	r := newTestRuntime(t, nil)
	dir := t.TempDir()
	lower, upper := filepath.Join(dir, "l1"), filepath.Join(dir, "l2")
	for _, d := range []string{filepath.Join(lower, "data"), filepath.Join(upper, "data")} {
		if err := os.MkdirAll(d, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	_ = os.WriteFile(filepath.Join(lower, "data", "hidden"), []byte("x"), 0o644)
	_ = os.WriteFile(filepath.Join(lower, "data", "kept"), []byte("k"), 0o644)
	// A whiteout is a 0/0 character device.
	if err := syscall.Mknod(filepath.Join(upper, "data", "hidden"), syscall.S_IFCHR, 0); err != nil {
		t.Fatal(err)
	}
	s := baseSpec(t, "ls", "/data")
	s.Layers = []string{busyboxLayer(t), lower, upper}
	_, out, errOut := capture(t, r, s)
	if strings.TrimSpace(out) != "kept" {
		t.Fatalf("ls /data = %q (stderr %q), want only kept", out, errOut)
	}
	// Writes land in the container's upper dir, never in a layer.
	w := baseSpec(t, "sh", "-c", "echo new > /data/kept")
	w.Layers = s.Layers
	capture(t, r, w)
	if b, _ := os.ReadFile(filepath.Join(lower, "data", "kept")); string(b) != "k" {
		t.Fatalf("layer was modified: %q", b)
	}
}

// assertGone checks that nothing of container id is left anywhere.
func assertGone(t *testing.T, r *Runtime, id string) {
	t.Helper()
	bundle := r.bundle(id)
	f, err := os.Open("/proc/self/mountinfo")
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		if strings.Contains(sc.Text(), bundle) {
			t.Errorf("mount left: %s", sc.Text())
		}
	}
	for _, d := range r.cgroupPaths(id).Dirs() {
		if _, err := os.Stat(d); err == nil {
			t.Errorf("cgroup left: %s", d)
		}
	}
	if _, err := os.Stat(r.stateDir(id)); err == nil {
		t.Errorf("runtime state left: %s", r.stateDir(id))
	}
	if _, err := os.Stat(bundle); err == nil {
		t.Errorf("bundle left: %s", bundle)
	}
	if _, err := r.records.Get(context.Background(), id); !errdefs.IsNotFound(err) {
		t.Errorf("record left: %v", err)
	}
}

func TestDeleteLeavesNothing(t *testing.T) {
	r := newTestRuntime(t, nil)
	// Running, with limits in every controller.
	s := baseSpec(t, "sleep", "300")
	s.Limits = Limits{CPUs: 1, MemoryBytes: 64 << 20, Pids: 32, CPUShares: 512}
	run(t, r, s)
	if err := r.Delete(context.Background(), s.ID); err != nil {
		t.Fatal(err)
	}
	assertGone(t, r, s.ID)
	if err := r.Delete(context.Background(), s.ID); !errdefs.IsNotFound(err) {
		t.Fatalf("second delete: %v, want not found", err)
	}
	// Exited.
	e := baseSpec(t, "true")
	run(t, r, e)
	wait(t, r, e.ID)
	if err := r.Delete(context.Background(), e.ID); err != nil {
		t.Fatal(err)
	}
	assertGone(t, r, e.ID)
	// Created, never started.
	cs := baseSpec(t, "echo", "never")
	c, err := r.Create(context.Background(), cs)
	if err != nil {
		t.Fatal(err)
	}
	if c.Status != StatusCreated {
		t.Fatalf("status %q", c.Status)
	}
	if err := r.Delete(context.Background(), cs.ID); err != nil {
		t.Fatal(err)
	}
	assertGone(t, r, cs.ID)
	// Frozen.
	fz := baseSpec(t, "sleep", "300")
	run(t, r, fz)
	if err := r.Freeze(fz.ID); err != nil {
		t.Fatal(err)
	}
	if err := r.Delete(context.Background(), fz.ID); err != nil {
		t.Fatal(err)
	}
	assertGone(t, r, fz.ID)
	// A failed create (bad command) leaves nothing either.
	bad := baseSpec(t, "/no/such/binary")
	if _, err := r.Run(context.Background(), bad); err == nil {
		t.Fatal("run of a missing binary succeeded")
	} else if !strings.Contains(err.Error(), "no such file") {
		t.Logf("error: %v", err)
	}
	assertGone(t, r, bad.ID)
}

func TestCreateStart(t *testing.T) {
	r := newTestRuntime(t, nil)
	s := baseSpec(t, "sh", "-c", "exit 5")
	if _, err := r.Create(context.Background(), s); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = r.Delete(context.Background(), s.ID) })
	if err := r.Start(context.Background(), s.ID); err != nil {
		t.Fatal(err)
	}
	if st := wait(t, r, s.ID); st.Code != 5 {
		t.Fatalf("status %+v", st)
	}
	if _, err := r.Run(context.Background(), Spec{ID: s.ID, Layers: s.Layers, Args: s.Args}); !errdefs.IsConflict(err) {
		t.Fatalf("duplicate id: %v", err)
	}
	cs, err := r.List(context.Background())
	if err != nil || len(cs) != 1 || cs[0].ID != s.ID || cs[0].Status != StatusStopped {
		t.Fatalf("list: %v %+v", err, cs)
	}
}

func TestRecover(t *testing.T) {
	needRoot(t)
	records := &MemRecords{}
	dir := t.TempDir()
	opts := Options{Root: filepath.Join(dir, "containers"), RuntimeRoot: filepath.Join(dir, "runc"), Records: records, CgroupParent: testCgroupParent}
	r1, err := New(context.Background(), opts)
	if err != nil {
		t.Fatal(err)
	}
	keep := baseSpec(t, "sleep", "300")
	c, err := r1.Run(context.Background(), keep)
	if err != nil {
		t.Fatal(err)
	}
	// An orphan: a container whose record is lost.
	orphan := baseSpec(t, "sleep", "300")
	if _, err := r1.Run(context.Background(), orphan); err != nil {
		t.Fatal(err)
	}
	_ = records.Delete(context.Background(), orphan.ID)
	// A record whose container died while no daemon watched.
	dead := baseSpec(t, "sleep", "300")
	if _, err := r1.Run(context.Background(), dead); err != nil {
		t.Fatal(err)
	}
	if err := r1.Signal(dead.ID, syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	wait(t, r1, dead.ID)
	// A stray cgroup with no container at all.
	stray := testID(t)
	strayDir := r1.cgroupPaths(stray).V1["pids"]
	if r1.layout.V2Only() {
		strayDir = r1.cgroupPaths(stray).Unified
	}
	if err := os.MkdirAll(strayDir, 0o755); err != nil {
		t.Fatal(err)
	}

	r2, err := New(context.Background(), opts)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		for _, id := range []string{keep.ID, orphan.ID, dead.ID, stray} {
			_ = r2.Delete(context.Background(), id)
		}
	})
	adopted, removed, err := r2.Recover(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	byID := map[string]*Container{}
	for _, a := range adopted {
		byID[a.ID] = a
	}
	if a := byID[keep.ID]; len(adopted) != 2 || a == nil || a.Pid != c.Pid || a.Status != StatusRunning {
		t.Fatalf("adopted %d containers, want %s running with pid %d and %s stopped", len(adopted), keep.ID, c.Pid, dead.ID)
	}
	// A recorded container that exited while no daemon watched stays listed
	// as stopped, with its exit status unknown, until it is deleted.
	if a := byID[dead.ID]; a == nil || a.Status != StatusStopped {
		t.Fatalf("dead container %s not kept as stopped: %+v", dead.ID, a)
	}
	if st, err := r2.Wait(context.Background(), dead.ID); err != nil || st.Known {
		t.Fatalf("wait on a recovered stopped container: %+v, %v; want an unknown status", st, err)
	}
	if err := r2.Delete(context.Background(), dead.ID); err != nil {
		t.Fatal(err)
	}
	assertGone(t, r2, dead.ID)
	for _, id := range []string{orphan.ID, stray} {
		found := false
		for _, x := range removed {
			found = found || x == id
		}
		if !found {
			t.Errorf("%s not in removed %v", id, removed)
		}
		assertGone(t, r2, id)
	}
	// The adopted container is fully managed: stats, freeze, stop, delete.
	if _, err := r2.Stats(keep.ID); err != nil {
		t.Fatal(err)
	}
	if _, err := r2.Stop(context.Background(), keep.ID, 0); err != nil {
		t.Fatal(err)
	}
	if err := r2.Delete(context.Background(), keep.ID); err != nil {
		t.Fatal(err)
	}
	assertGone(t, r2, keep.ID)
}

func TestBadSpecs(t *testing.T) {
	r := newTestRuntime(t, nil)
	layer := busyboxLayer(t)
	tests := []struct {
		field string
		spec  Spec
	}{
		{"id", Spec{ID: "../x", Layers: []string{layer}, Args: []string{"true"}}},
		{"layers", Spec{ID: "a", Args: []string{"true"}}},
		{"layers[0]", Spec{ID: "a", Layers: []string{"/nonexistent"}, Args: []string{"true"}}},
		{"args", Spec{ID: "a", Layers: []string{layer}}},
		{"mounts[0].type", Spec{ID: "a", Layers: []string{layer}, Args: []string{"true"}, Mounts: []Mount{{Destination: "/x", Type: "nfs"}}}},
		{"capabilities", Spec{ID: "a", Layers: []string{layer}, Args: []string{"true"}, Capabilities: []string{"CAP_FLY"}}},
		{"limits.memory", Spec{ID: "a", Layers: []string{layer}, Args: []string{"true"}, Limits: Limits{MemoryBytes: 1024}}},
	}
	for _, tc := range tests {
		_, err := r.Run(context.Background(), tc.spec)
		if !errdefs.IsInvalid(err) || errdefs.Field(err) != tc.field {
			t.Errorf("%s: got %v (field %q)", tc.field, err, errdefs.Field(err))
		}
	}
	if _, err := r.Wait(context.Background(), "missing"); !errdefs.IsNotFound(err) {
		t.Fatalf("wait missing: %v", err)
	}
	if err := r.Delete(context.Background(), "missing"); !errors.Is(err, errdefs.ErrNotFound) {
		t.Fatalf("delete missing: %v", err)
	}
}

// TestEphemeralNotRecorded checks that an ephemeral container is never
// written to the records and that a new Runtime removes it as an orphan.
func TestEphemeralNotRecorded(t *testing.T) {
	records := &MemRecords{}
	dir := t.TempDir()
	opts := Options{Root: filepath.Join(dir, "containers"), RuntimeRoot: filepath.Join(dir, "runc"), Records: records, CgroupParent: testCgroupParent}
	r1, err := New(context.Background(), opts)
	if err != nil {
		t.Fatal(err)
	}
	s := baseSpec(t, "sleep", "300")
	s.Ephemeral = true
	if _, err := r1.Run(context.Background(), s); err != nil {
		t.Fatal(err)
	}
	if recs, _ := records.List(context.Background()); len(recs) != 0 {
		t.Fatalf("ephemeral container recorded: %+v", recs)
	}
	if cs, _ := r1.List(context.Background()); len(cs) != 1 || cs[0].ID != s.ID {
		t.Fatalf("ephemeral container not listed by its runtime: %+v", cs)
	}
	r2, err := New(context.Background(), opts)
	if err != nil {
		t.Fatal(err)
	}
	adopted, removed, err := r2.Recover(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	if len(adopted) != 0 || len(removed) != 1 || removed[0] != s.ID {
		t.Fatalf("recover: adopted %d, removed %v; want the ephemeral container removed", len(adopted), removed)
	}
	assertGone(t, r2, s.ID)
}
