package wipe

import (
	goruntime "runtime"
	"testing"

	"golang.org/x/sys/unix"
)

// TestIPCEmpty: the kernel's counts tell a namespace with any one kind of
// System V IPC object from an empty one.
func TestIPCEmpty(t *testing.T) {
	done := make(chan struct{})
	go func() {
		defer close(done)
		goruntime.LockOSThread() // never unlocked: the thread, in a namespace of its own, ends with the goroutine
		if err := unix.Unshare(unix.CLONE_NEWIPC); err != nil {
			t.Errorf("unshare: %v", err)
			return
		}
		if !ipcEmpty() {
			t.Error("a new namespace is not empty")
		}
		for name, make := range map[string]func() (uintptr, unix.Errno){
			"message queue": func() (uintptr, unix.Errno) {
				id, _, e := unix.Syscall(unix.SYS_MSGGET, 0 /* IPC_PRIVATE */, unix.IPC_CREAT|0o600, 0)
				return id, e
			},
			"semaphore set": func() (uintptr, unix.Errno) {
				id, _, e := unix.Syscall(unix.SYS_SEMGET, 0, 1, unix.IPC_CREAT|0o600)
				return id, e
			},
			"shared memory segment": func() (uintptr, unix.Errno) {
				id, _, e := unix.Syscall(unix.SYS_SHMGET, 0, 4096, unix.IPC_CREAT|0o600)
				return id, e
			},
		} {
			if _, e := make(); e != 0 {
				t.Errorf("%s: %v", name, e)
				continue
			}
			if ipcEmpty() {
				t.Errorf("with a %s: counted empty", name)
			}
			if err := removeIPC(); err != nil {
				t.Errorf("remove: %v", err)
			}
			if !ipcEmpty() {
				t.Errorf("after the %s was removed: not empty", name)
			}
		}
	}()
	<-done
}
