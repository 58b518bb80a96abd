package runtime

import (
	"context"
	"os"
	"path/filepath"
	"syscall"
	"testing"
	"time"

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
