package runtime

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"io/fs"
	"math"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

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

// A container's environment (secrets asked for in it among them) is in no
// file of its bundle under Root, which is on disk: the runtime's spec is
// kept beside its state, on the runtime's tmpfs; an exec, whose process
// spec has the environment too, still works.
func TestEnvNotInBundle(t *testing.T) {
	r := newTestRuntime(t, nil)
	s := baseSpec(t, "sleep", "300")
	secret := "shh-" + testID(t)
	s.Env = []string{"API_KEY=" + secret}
	run(t, r, s)
	var out strings.Builder
	if _, err := r.Exec(context.Background(), s.ID, ExecSpec{Args: []string{"sh", "-c", `echo "$API_KEY"`}, Stdout: &out}); err != nil {
		t.Fatal(err)
	}
	if out.String() != secret+"\n" {
		t.Fatalf("exec saw $API_KEY %q, want %q", out.String(), secret)
	}
	err := filepath.WalkDir(r.root, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() && d.Name() == "rootfs" {
			return filepath.SkipDir // the container's own files, through its overlay
		}
		if !d.Type().IsRegular() {
			return nil
		}
		b, err := os.ReadFile(p)
		if err != nil {
			return err
		}
		if bytes.Contains(b, []byte(secret)) {
			t.Errorf("%s holds the environment's secret", p)
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	b, err := os.ReadFile(filepath.Join(r.specDir(s.ID), "config.json"))
	if err != nil || !bytes.Contains(b, []byte(secret)) {
		t.Fatalf("the spec beside the runtime's state has no $API_KEY: %v", err)
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
	if _, err := os.Stat(r.specDir(id)); err == nil {
		t.Errorf("spec left: %s", r.specDir(id))
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
	} else if !strings.Contains(err.Error(), "/no/such/binary") || !strings.Contains(err.Error(), bad.ID) {
		t.Fatalf("failed create: %v, want an error naming the container and /no/such/binary", err)
	}
	assertGone(t, r, bad.ID)
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
		{"limits.memory", Spec{ID: "a", Layers: []string{layer}, Args: []string{"true"}, Limits: Limits{MemoryBytes: -1}}},
		{"limits.pids", Spec{ID: "a", Layers: []string{layer}, Args: []string{"true"}, Limits: Limits{Pids: -1}}},
		{"limits.cpu_shares", Spec{ID: "a", Layers: []string{layer}, Args: []string{"true"}, Limits: Limits{CPUShares: 1}}},
		{"limits.cpu_shares", Spec{ID: "a", Layers: []string{layer}, Args: []string{"true"}, Limits: Limits{CPUShares: 1 << 20}}},
	}
	for _, cpus := range []float64{-0.5, 0.001, math.NaN(), math.Inf(1), math.Inf(-1), MaxCPUs + 0.5, 1e300} {
		tests = append(tests, struct {
			field string
			spec  Spec
		}{"limits.cpus", Spec{ID: "a", Layers: []string{layer}, Args: []string{"true"}, Limits: Limits{CPUs: cpus}}})
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

// TestKillWhileFreezing: Delete and Stop end a container that something
// freezes again and again meanwhile (the serving ladder freezing an idle
// replica that is being removed): frozen tasks die only once thawed
// (cgroup v1), so a kill must keep the cgroup thawed until init has gone,
// not thaw once before waiting.
func TestKillWhileFreezing(t *testing.T) {
	r := newTestRuntime(t, nil)
	for i, end := range []func(ctx context.Context, id string) error{
		func(ctx context.Context, id string) error { return r.Delete(ctx, id) },
		func(ctx context.Context, id string) error { _, err := r.Stop(ctx, id, 0); return err },
	} {
		for round := 0; round < 3; round++ {
			s := baseSpec(t, "sh", "-c", "sleep 300 & sleep 300 & wait")
			run(t, r, s)
			settled(t, r, s.ID, 3)
			if err := r.Freeze(s.ID); err != nil {
				t.Fatal(err)
			}
			stop := make(chan struct{})
			freezing := make(chan struct{})
			go func() {
				defer close(freezing)
				for {
					select {
					case <-stop:
						return
					default:
					}
					if err := r.Freeze(s.ID); errors.Is(err, errdefs.ErrNotFound) || errors.Is(err, errExited) {
						return
					}
				}
			}()
			ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
			err := end(ctx, s.ID)
			cancel()
			close(stop)
			<-freezing
			if err != nil {
				state, _ := os.ReadFile(filepath.Join(r.cgroupPaths(s.ID).V1["freezer"], "freezer.state"))
				t.Fatalf("end %d, round %d: %v (freezer %q)", i, round, err, bytes.TrimSpace(state))
			}
			if i == 1 {
				if err := r.Delete(context.Background(), s.ID); err != nil {
					t.Fatal(err)
				}
			}
			assertGone(t, r, s.ID)
		}
	}
}

// settled waits until container id's cgroup holds n processes: its shell
// has forked them all, so a freeze does not race a fork or an exec.
func settled(t *testing.T, r *Runtime, id string, n int) {
	t.Helper()
	p := r.cgroupPaths(id)
	dir := p.Unified
	if !p.V2 {
		dir = p.V1["freezer"]
	}
	var b []byte
	for deadline := time.Now().Add(60 * time.Second); time.Now().Before(deadline); time.Sleep(10 * time.Millisecond) {
		var err error
		if b, err = os.ReadFile(filepath.Join(dir, "cgroup.procs")); err == nil && len(bytes.Fields(b)) >= n {
			return
		}
	}
	t.Fatalf("container %s: cgroup.procs %q, want %d processes", id, b, n)
}
