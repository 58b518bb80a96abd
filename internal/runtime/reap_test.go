package runtime

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/shoal-run/shoal/internal/errdefs"
)

// zombies lists this process's children that have exited and wait to be
// reaped.
func zombies() []int {
	entries, _ := os.ReadDir("/proc")
	var out []int
	for _, e := range entries {
		pid, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		if state, ppid, ok := procStat(pid); ok && state == 'Z' && ppid == os.Getpid() {
			out = append(out, pid)
		}
	}
	return out
}

// assertNoZombies fails if a child of this process is left unreaped. Reaping
// by a watcher goroutine is asynchronous, so it is polled for.
func assertNoZombies(t *testing.T) {
	t.Helper()
	for i := 0; i < 200; i++ {
		if len(zombies()) == 0 {
			return
		}
		time.Sleep(10 * time.Millisecond)
	}
	var desc []string
	for _, pid := range zombies() {
		st, _ := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
		cg, _ := os.ReadFile(fmt.Sprintf("/proc/%d/cgroup", pid))
		desc = append(desc, fmt.Sprintf("%s [cgroup %q]", strings.TrimSpace(string(st)), cg))
	}
	t.Fatalf("zombie children left: %s", strings.Join(desc, "; "))
}

// TestRunCancelled cancels the caller's context at different points of Run
// and Create: whatever the outcome, no child is left unreaped and, once
// deleted, nothing of the container is left.
func TestRunCancelled(t *testing.T) {
	r := newTestRuntime(t, nil)
	delays := []time.Duration{0, time.Millisecond, 3 * time.Millisecond, 10 * time.Millisecond, 30 * time.Millisecond, 60 * time.Millisecond}
	for i, d := range delays {
		for _, start := range []bool{true, false} {
			s := baseSpec(t, "sleep", "300")
			ctx, cancel := context.WithCancel(context.Background())
			go func() {
				time.Sleep(d)
				cancel()
			}()
			var err error
			if start {
				_, err = r.Run(ctx, s)
			} else {
				_, err = r.Create(ctx, s)
			}
			cancel()
			if err != nil && !errors.Is(err, context.Canceled) {
				t.Fatalf("round %d (start %v): %v", i, start, err)
			}
			if err == nil {
				if derr := r.Delete(context.Background(), s.ID); derr != nil {
					t.Fatal(derr)
				}
			}
			assertNoZombies(t)
			assertGone(t, r, s.ID)
		}
	}
}

// TestReapOrphans leaves processes to this subreaper the way a runtime that
// died half-way does: one still running in the container's cgroup, and one
// runc init stage that has exited (a zombie shows no cgroup on v1). It
// checks that reapOrphans kills and reaps exactly those, and leaves this
// process's other children, running or exited, alone.
func TestReapOrphans(t *testing.T) {
	r := newTestRuntime(t, nil)
	id := testID(t)
	paths := r.cgroupPaths(id)
	procsDir := paths.V1["pids"]
	if paths.V2 {
		procsDir = paths.Unified
	}
	if err := os.MkdirAll(procsDir, 0o755); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		r.reapOrphans(id)
		_ = paths.Remove()
	})
	bystander := exec.Command("sleep", "300")
	exited := exec.Command("true")
	for _, c := range []*exec.Cmd{bystander, exited} {
		if err := c.Start(); err != nil {
			t.Fatal(err)
		}
	}
	t.Cleanup(func() { _ = bystander.Process.Kill(); _ = bystander.Wait() })

	// sh moves into the cgroup and starts a sleeper and a subshell that
	// names itself as runc's init does and exits once sh is gone: both are
	// reparented here.
	script := fmt.Sprintf(`echo $$ > %s/cgroup.procs; sleep 300 >/dev/null 2>&1 & echo $!; (sleep 0.2; echo -n 'runc:[2:INIT]' > /proc/self/comm) >/dev/null 2>&1 & echo $!`, procsDir)
	out, err := exec.Command("sh", "-c", script).Output()
	if err != nil {
		t.Fatal(err)
	}
	var pids []int
	for _, f := range strings.Fields(string(out)) {
		pid, _ := strconv.Atoi(f)
		pids = append(pids, pid)
	}
	if len(pids) != 2 {
		t.Fatalf("sh printed %q", out)
	}
	eventually(t, "a running orphan and an exited runc init orphan", func() bool {
		s0, p0, ok0 := procStat(pids[0])
		s1, p1, ok1 := procStat(pids[1])
		return ok0 && ok1 && p0 == os.Getpid() && p1 == os.Getpid() && s0 != 'Z' && s1 == 'Z' && isRuncInit(pids[1])
	})
	if st, _, _ := procStat(exited.Process.Pid); st != 'Z' {
		t.Fatalf("bystander true is in state %q, want a zombie", st)
	}
	if n := r.reapOrphans(id); n != 2 {
		t.Fatalf("reaped %d, want 2", n)
	}
	for _, pid := range pids {
		if _, err := os.Stat(fmt.Sprintf("/proc/%d", pid)); err == nil {
			t.Errorf("pid %d still exists", pid)
		}
	}
	if err := bystander.Process.Signal(syscall.Signal(0)); err != nil {
		t.Fatalf("running bystander: %v", err)
	}
	if err := exited.Wait(); err != nil {
		t.Fatalf("exited bystander was not left to its owner: %v", err)
	}
	assertNoZombies(t)
}

// TestExecCancelled cancels Exec while the process runs and while the
// runtime is still setting it up: Exec returns the context's error, the
// process is gone from the container, and nothing is left unreaped.
func TestExecCancelled(t *testing.T) {
	r := newTestRuntime(t, nil)
	s := baseSpec(t, "sleep", "300")
	c := run(t, r, s)
	paths := r.cgroupPaths(s.ID)
	onlyInit := func() bool {
		procs, err := paths.Procs()
		return err == nil && len(procs) == 1 && procs[0] == c.Pid
	}
	// Running: cancel once the process is in the container.
	ctx, cancel := context.WithCancel(context.Background())
	errc := make(chan error, 1)
	go func() {
		_, err := r.Exec(ctx, s.ID, ExecSpec{Args: []string{"sleep", "301"}})
		errc <- err
	}()
	eventually(t, "exec process started", func() bool {
		procs, _ := paths.Procs()
		return len(procs) >= 2
	})
	cancel()
	if err := <-errc; !errors.Is(err, context.Canceled) {
		t.Fatalf("cancelled exec: %v", err)
	}
	eventually(t, "exec process gone", onlyInit)
	assertNoZombies(t)
	// During set-up, at different points.
	for _, d := range []time.Duration{0, time.Millisecond, 3 * time.Millisecond, 10 * time.Millisecond, 30 * time.Millisecond} {
		ctx, cancel := context.WithCancel(context.Background())
		go func() {
			time.Sleep(d)
			cancel()
		}()
		_, err := r.Exec(ctx, s.ID, ExecSpec{Args: []string{"sleep", "301"}})
		cancel()
		if !errors.Is(err, context.Canceled) {
			t.Fatalf("exec cancelled after %v: %v", d, err)
		}
		eventually(t, "exec process gone", onlyInit)
		assertNoZombies(t)
	}
	// The container itself is unharmed.
	var out strings.Builder
	if st, err := r.Exec(context.Background(), s.ID, ExecSpec{Args: []string{"echo", "ok"}, Stdout: &out}); err != nil || st.Code != 0 || out.String() != "ok\n" {
		t.Fatalf("exec after cancellations: %+v %v %q", st, err, out.String())
	}
}

// TestDeleteWhileCreating deletes a container while Run is creating it: the
// Delete is refused as a conflict, never half-done, and works once Run has
// returned.
func TestDeleteWhileCreating(t *testing.T) {
	r := newTestRuntime(t, nil)
	registered := func(id string) bool {
		r.mu.Lock()
		defer r.mu.Unlock()
		return r.ctrs[id] != nil
	}
	conflicts := 0
	for round := 0; round < 5 && conflicts == 0; round++ {
		s := baseSpec(t, "sleep", "300")
		errc := make(chan error, 1)
		go func() {
			_, err := r.Run(context.Background(), s)
			errc <- err
		}()
		for i := 0; !registered(s.ID) && i < 100000; i++ {
			time.Sleep(10 * time.Microsecond)
		}
		var runErr error
		deleted := false
		for done := false; !done; {
			select {
			case runErr = <-errc:
				done = true
			default:
				err := r.Delete(context.Background(), s.ID)
				switch {
				case errdefs.IsConflict(err) && strings.Contains(err.Error(), "is being created"):
					conflicts++
				case err == nil:
					// Run finished between the check and the Delete.
					runErr = <-errc
					done, deleted = true, true
				default:
					t.Fatalf("delete during create: %v", err)
				}
			}
		}
		if runErr != nil {
			t.Fatal(runErr)
		}
		if !deleted {
			if c, err := r.Get(s.ID); err != nil || c.Status != StatusRunning {
				t.Fatalf("after create: %+v %v", c, err)
			}
			if err := r.Delete(context.Background(), s.ID); err != nil {
				t.Fatal(err)
			}
		}
		assertGone(t, r, s.ID)
	}
	if conflicts == 0 {
		t.Fatal("no Delete met the container while it was being created")
	}
}
