package keptproc

import (
	"os"
	"os/exec"
	"runtime"
	"syscall"
	"testing"
	"time"
)

// A process started by Start, with a death signal, outlives the end of
// the thread that asked for it; one started on that thread itself is
// killed when the thread ends (the control that the thread did end).
func TestStartKeptOutlivesThread(t *testing.T) {
	kept := exec.Command("sleep", "60")
	kept.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	plain := exec.Command("sleep", "60")
	plain.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	var keptExited <-chan struct{}
	var keptErr, plainErr error
	// The runtime never ends the main thread: a goroutine that lands on
	// it keeps it (so that the next lands elsewhere) until the test ends.
	for {
		onMain := make(chan bool)
		release := make(chan struct{})
		go func() {
			runtime.LockOSThread() // never unlocked off the main thread: the thread ends with this goroutine
			if syscall.Gettid() == os.Getpid() {
				onMain <- true
				<-release
				runtime.UnlockOSThread()
				return
			}
			if keptExited, keptErr = Start(kept); keptErr == nil {
				plainErr = plain.Start()
			}
			onMain <- false
		}()
		if !<-onMain {
			break
		}
		defer close(release)
	}
	if keptErr != nil || plainErr != nil {
		t.Fatalf("start: %v, %v", keptErr, plainErr)
	}
	t.Cleanup(func() { kept.Process.Kill(); <-keptExited })
	plainExited := make(chan struct{})
	go func() { plain.Wait(); close(plainExited) }()
	t.Cleanup(func() { plain.Process.Kill(); <-plainExited })
	select {
	case <-plainExited:
	case <-time.After(30 * time.Second):
		t.Fatal("the process started on the ended thread still runs: the thread did not end")
	}
	if ws, ok := plain.ProcessState.Sys().(syscall.WaitStatus); !ok || ws.Signal() != syscall.SIGKILL {
		t.Fatalf("the process started on the ended thread: %v, want killed", plain.ProcessState)
	}
	select {
	case <-keptExited:
		t.Fatalf("the process started by Start died with the thread that asked for it: %v", kept.ProcessState)
	default:
	}
	if err := kept.Process.Signal(syscall.Signal(0)); err != nil {
		t.Fatalf("the process started by Start: %v", err)
	}
}
