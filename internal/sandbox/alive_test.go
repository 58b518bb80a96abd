package sandbox

import (
	"os"
	"os/exec"
	"testing"

	"golang.org/x/sys/unix"
)

// TestProcessAlive: a running process is alive; one that exited is not,
// whether still a zombie (not yet waited for) or gone. ready relies on it
// when Serve's end has not yet reached its reply channel.
func TestProcessAlive(t *testing.T) {
	if !processAlive(os.Getpid()) {
		t.Fatal("this test's own process is not alive")
	}
	cmd := exec.Command("true")
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	pid := cmd.Process.Pid
	// Wait for the exit without reaping: the child is then a zombie.
	var info unix.Siginfo
	if err := unix.Waitid(unix.P_PID, pid, &info, unix.WEXITED|unix.WNOWAIT, nil); err != nil {
		t.Fatal(err)
	}
	if processAlive(pid) {
		t.Fatalf("zombie %d counted alive", pid)
	}
	if err := cmd.Wait(); err != nil {
		t.Fatal(err)
	}
	if processAlive(pid) {
		t.Fatalf("reaped %d counted alive", pid)
	}
}
