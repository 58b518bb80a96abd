// Package keptproc starts a process whose death signal
// (SysProcAttr.Pdeathsig) must come only when the process that started it
// ends: Linux sends that signal when the *thread* that started the child
// ends, and a goroutine that ends locked to its thread (as those that
// enter a network namespace do) ends that thread. Started on any thread,
// such a child could be killed mid-run by an unrelated goroutine. The
// test harnesses start their etcd servers with it.
package keptproc

import (
	"os/exec"
	"runtime"
)

// Start starts cmd and waits for it on a thread kept for it alone, and
// returns a channel closed once it exits (cmd.Wait has returned).
func Start(cmd *exec.Cmd) (<-chan struct{}, error) {
	exited := make(chan struct{})
	started := make(chan error, 1)
	go func() {
		runtime.LockOSThread()
		defer runtime.UnlockOSThread()
		if err := cmd.Start(); err != nil {
			started <- err
			return
		}
		started <- nil
		cmd.Wait()
		close(exited)
	}()
	if err := <-started; err != nil {
		return nil, err
	}
	return exited, nil
}
