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
