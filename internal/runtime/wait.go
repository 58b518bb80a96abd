package runtime

import (
	"errors"
	"fmt"
	"os"
	"sync"
	"syscall"
	"unsafe"

	"golang.org/x/sys/unix"

	"github.com/shoal-run/shoal/internal/runtime/cgroups"
)

// BecomeSubreaper makes this process a child subreaper, so that container
// init processes, orphaned when the OCI runtime exits, become its children and
// their exit status can be read. Call it once at daemon start, before
// creating containers.
func BecomeSubreaper() error {
	if err := unix.Prctl(unix.PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0); err != nil {
		return fmt.Errorf("become child subreaper: %w", err)
	}
	return nil
}

// ctr is a container this Runtime manages.
type ctr struct {
	rec Record

	mu       sync.Mutex
	pidfd    *os.File
	started  bool
	watching bool // a watch goroutine owns pidfd and will close done
	// deleting marks a placeholder that holds the id of an unmanaged
	// container while Delete removes it.
	deleting bool

	done  chan struct{} // closed once the init process has exited
	exit  ExitStatus
	final cgroups.Stats // stats read right after exit
}

func (c *ctr) isWatching() bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.watching
}

func (c *ctr) exited() bool {
	select {
	case <-c.done:
		return true
	default:
		return false
	}
}

// childInfo mirrors the SIGCHLD layout of siginfo_t on Linux.
type childInfo struct {
	Signo  int32
	Errno  int32
	Code   int32
	_      int32
	Pid    int32
	UID    uint32
	Status int32
	_      [100]byte
}

var _ [unsafe.Sizeof(unix.Siginfo{}) - unsafe.Sizeof(childInfo{})]byte

// openPidfd opens a non-blocking pidfd that the Go netpoller can wait on.
func openPidfd(pid int) (*os.File, error) {
	fd, err := unix.PidfdOpen(pid, unix.PIDFD_NONBLOCK)
	if err != nil {
		return nil, fmt.Errorf("pidfd_open %d: %w", pid, err)
	}
	return os.NewFile(uintptr(fd), fmt.Sprintf("pidfd:%d", pid)), nil
}

// waitPidfd parks the calling goroutine until the process exits and returns
// its status. A child is reaped with waitid(P_PIDFD); for a process that is
// not this process's child the status is unknown.
func waitPidfd(f *os.File) (ExitStatus, error) {
	rc, err := f.SyscallConn()
	if err != nil {
		return ExitStatus{}, err
	}
	var st ExitStatus
	var werr error
	err = rc.Read(func(fd uintptr) bool {
		for {
			var info childInfo
			err := unix.Waitid(unix.P_PIDFD, int(fd), (*unix.Siginfo)(unsafe.Pointer(&info)), unix.WEXITED|unix.WNOHANG, nil)
			switch {
			case err == nil:
				if info.Pid == 0 {
					return false // still running: wait for readability
				}
				st = decodeChild(info)
				return true
			case errors.Is(err, unix.EINTR):
				continue
			case errors.Is(err, unix.ECHILD):
				// Not our child: a readable pidfd means it has exited.
				pfd := []unix.PollFd{{Fd: int32(fd), Events: unix.POLLIN}}
				n, perr := unix.Poll(pfd, 0)
				if perr == nil && n > 0 {
					st = ExitStatus{Known: false}
					return true
				}
				return false
			default:
				werr = err
				return true
			}
		}
	})
	if err != nil {
		return ExitStatus{}, err
	}
	return st, werr
}

func decodeChild(info childInfo) ExitStatus {
	const (
		cldExited = 1
		cldKilled = 2
		cldDumped = 3
	)
	switch info.Code {
	case cldKilled, cldDumped:
		sig := syscall.Signal(info.Status)
		return ExitStatus{Code: 128 + int(sig), Signal: sig, Known: true}
	default:
		return ExitStatus{Code: int(info.Status), Known: true}
	}
}

// watch waits for c's init to exit, records the exit status with the cgroup's
// last counters (read before anything removes the cgroup) and closes c.done.
func (r *Runtime) watch(c *ctr) {
	release := watchPidNamespace(c.rec.Pid, c.pidfd)
	st, err := waitPidfd(c.pidfd)
	release()
	if err != nil {
		r.log.Warn("container wait failed", "container", c.rec.ID, "pid", c.rec.Pid, "err", err)
	}
	p := r.cgroupPaths(c.rec.ID)
	if s, err := p.Stats(); err == nil {
		c.final = s
		st.OOMKilled = oomKilled(st, s.OOMKills)
	}
	c.mu.Lock()
	c.exit = st
	c.pidfd.Close()
	c.pidfd = nil
	c.mu.Unlock()
	close(c.done)
	r.log.Debug("container exited", "container", c.rec.ID, "code", st.Code, "known", st.Known, "oom", st.OOMKilled)
}

// oomKilled applies the rule documented on ExitStatus.OOMKilled: the
// container's cgroup is new at create, so any OOM kill counted in it happened
// during this run; it explains the exit only when init died of SIGKILL (the
// OOM killer's signal) or exited non-zero (a shell reporting its killed
// child). An init that exited 0 was not stopped by the OOM killer, whatever
// happened to its other processes.
func oomKilled(st ExitStatus, oomKills uint64) bool {
	if !st.Known || oomKills == 0 {
		return false
	}
	return st.Signal == syscall.SIGKILL || st.Code != 0
}

// signal sends sig to c's init through its pidfd, which cannot hit a
// recycled pid.
func (c *ctr) signal(sig syscall.Signal) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.pidfd == nil {
		return errExited
	}
	rc, err := c.pidfd.SyscallConn()
	if err != nil {
		return err
	}
	// Control, not Fd: Fd would switch the descriptor to blocking mode and
	// take it out of the netpoller.
	cerr := rc.Control(func(fd uintptr) { err = unix.PidfdSendSignal(int(fd), sig, nil, 0) })
	if cerr != nil {
		return cerr
	}
	if errors.Is(err, unix.ESRCH) {
		return errExited
	}
	return err
}
