package runtime

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	goruntime "runtime"
	"syscall"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/shoal-run/shoal/internal/clock"
)

// TestStopGraceFakeClock drives Stop's grace period with a fake clock: the
// container ignores TERM, and only advancing the clock past the grace period
// brings SIGKILL.
func TestStopGraceFakeClock(t *testing.T) {
	needRoot(t)
	dir := t.TempDir()
	fake := clock.NewFake(time.Unix(1700000000, 0))
	r, err := New(context.Background(), Options{Root: filepath.Join(dir, "c"), RuntimeRoot: filepath.Join(dir, "runc"), Clock: fake, CgroupParent: testCgroupParent})
	if err != nil {
		t.Fatal(err)
	}
	ready := filepath.Join(t.TempDir(), "ready")
	s := baseSpec(t, "sh", "-c", `trap "" TERM; touch /out/ready; while true; do sleep 1; done`)
	s.Mounts = []Mount{{Source: filepath.Dir(ready), Destination: "/out"}}
	run(t, r, s)
	eventually(t, "trap installed", func() bool { _, err := os.Stat(ready); return err == nil })
	type result struct {
		st  ExitStatus
		err error
	}
	done := make(chan result, 1)
	go func() {
		st, err := r.Stop(context.Background(), s.ID, time.Hour)
		done <- result{st, err}
	}()
	eventually(t, "grace timer armed", func() bool { return fake.Timers() > 0 })
	select {
	case res := <-done:
		t.Fatalf("stopped before the grace period ended: %+v", res)
	default:
	}
	fake.Advance(time.Hour)
	res := <-done
	if res.err != nil || res.st.Signal != syscall.SIGKILL {
		t.Fatalf("stop: %+v %v, want SIGKILL", res.st, res.err)
	}
}

// TestStopSignalFromSpec: Stop sends the Spec's StopSignal first, so a
// container that ignores TERM and exits on QUIT ends on it, without the
// grace period (an hour on a clock that never moves) running out.
func TestStopSignalFromSpec(t *testing.T) {
	needRoot(t)
	dir := t.TempDir()
	fake := clock.NewFake(time.Unix(1700000000, 0))
	r, err := New(context.Background(), Options{Root: filepath.Join(dir, "c"), RuntimeRoot: filepath.Join(dir, "runc"), Clock: fake, CgroupParent: testCgroupParent})
	if err != nil {
		t.Fatal(err)
	}
	ready := filepath.Join(t.TempDir(), "ready")
	s := baseSpec(t, "sh", "-c", `trap "" TERM; trap "exit 3" QUIT; touch /out/ready; while true; do sleep 1; done`)
	s.Mounts = []Mount{{Source: filepath.Dir(ready), Destination: "/out"}}
	s.StopSignal = syscall.SIGQUIT
	run(t, r, s)
	eventually(t, "traps installed", func() bool { _, err := os.Stat(ready); return err == nil })
	st, err := r.Stop(context.Background(), s.ID, time.Hour)
	if err != nil || st.Signal != 0 || st.Code != 3 {
		t.Fatalf("stop: %+v %v, want exit code 3 from the QUIT trap", st, err)
	}
}

// TestStopReapsProcessJoinedFromOutside: a process that joined the
// container's pid namespace from outside, whose parent is this process (as
// the process of a `runc exec` that exited before it waited for it is: left
// to this subreaper), dies with the namespace when the container stops;
// the container's init finishes exiting only once that process is reaped.
// Stop must not wait for it in vain.
func TestStopReapsProcessJoinedFromOutside(t *testing.T) {
	r := newTestRuntime(t, nil)
	s := baseSpec(t, "sleep", "1000")
	c := run(t, r, s)
	cmd := exec.Command("sleep", "1000")
	if err := startInPidNamespace(cmd, c.Pid); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		// Reaps it if Stop did not, so the container can go.
		_ = cmd.Process.Kill()
		_ = cmd.Wait()
	})
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	st, err := r.Stop(ctx, s.ID, 0)
	if err != nil || st.Signal != syscall.SIGKILL {
		t.Fatalf("stop: %+v %v, want the init killed", st, err)
	}
}

// startInPidNamespace starts cmd, a child of this process, in the pid
// namespace of process pid (setns, then fork).
func startInPidNamespace(cmd *exec.Cmd, pid int) error {
	errc := make(chan error, 1)
	go func() {
		// The thread stays locked: it ends with the goroutine, so no other
		// goroutine forks into the namespace.
		goruntime.LockOSThread()
		fd, err := unix.Open(fmt.Sprintf("/proc/%d/ns/pid", pid), unix.O_RDONLY|unix.O_CLOEXEC, 0)
		if err != nil {
			errc <- err
			return
		}
		defer unix.Close(fd)
		if err := unix.Setns(fd, unix.CLONE_NEWPID); err != nil {
			errc <- fmt.Errorf("setns pid %d: %w", pid, err)
			return
		}
		errc <- cmd.Start()
	}()
	return <-errc
}
