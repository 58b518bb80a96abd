package runtime

import (
	"errors"
	"os"
	"os/signal"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"

	"golang.org/x/sys/unix"
)

// A process that joins a container's pid namespace from outside (setns and
// fork, as `runc exec` does) keeps its parent outside. When the container's
// init dies, the kernel kills every process of the namespace, and the init
// does not finish exiting until each of them has been reaped
// (zap_pid_ns_processes): an exec'd process whose runtime exited before it
// waited for it (a `runc exec` that gives up because the container is
// dying) is this subreaper's child, and while nothing waits for it the
// container's init never exits: Stop and Delete time out, Wait never
// returns. So, on every SIGCHLD, the exited children of this process that
// are in the pid namespace of a watched container (and are not its init)
// are reaped. Nothing else waits for them: the runtime's own children run
// in this process's pid namespace.

// pidNamespaces are the pid namespaces ("pid:[inode]") of the watched
// containers, each with its init's pid; the reaper runs once one is added.
var pidNamespaces struct {
	once sync.Once
	mu   sync.Mutex
	ns   map[string]int
}

// watchPidNamespace registers the pid namespace of container init pid,
// whose pidfd is f, for reaping until the returned func is called. A
// container in this process's own pid namespace is not registered.
func watchPidNamespace(pid int, f *os.File) (release func()) {
	ns, err := pidNamespace(pid)
	self, serr := os.Readlink("/proc/self/ns/pid")
	if err != nil || serr != nil || ns == self || !alive(f) {
		// alive after the read: the link was the init's, not a reused pid's.
		return func() {}
	}
	pidNamespaces.once.Do(startPidNamespaceReaper)
	pidNamespaces.mu.Lock()
	pidNamespaces.ns[ns] = pid
	pidNamespaces.mu.Unlock()
	reapPidNamespaceOrphans() // one that exited before the registration
	return func() {
		pidNamespaces.mu.Lock()
		if pidNamespaces.ns[ns] == pid {
			delete(pidNamespaces.ns, ns)
		}
		pidNamespaces.mu.Unlock()
	}
}

// alive reports whether the process of pidfd f has not exited.
func alive(f *os.File) bool {
	rc, err := f.SyscallConn()
	if err != nil {
		return false
	}
	var serr error
	if err := rc.Control(func(fd uintptr) { serr = unix.PidfdSendSignal(int(fd), 0, nil, 0) }); err != nil {
		return false
	}
	return serr == nil
}

func pidNamespace(pid int) (string, error) {
	return os.Readlink("/proc/" + strconv.Itoa(pid) + "/ns/pid")
}

func startPidNamespaceReaper() {
	pidNamespaces.ns = map[string]int{}
	ch := make(chan os.Signal, 1)
	signal.Notify(ch, syscall.SIGCHLD)
	go func() {
		for range ch {
			reapPidNamespaceOrphans()
		}
	}()
}

// reapPidNamespaceOrphans reaps the exited children of this process in the
// pid namespace of a watched container, other than its init.
func reapPidNamespaceOrphans() {
	pidNamespaces.mu.Lock()
	inits := make(map[string]int, len(pidNamespaces.ns))
	for ns, pid := range pidNamespaces.ns {
		inits[ns] = pid
	}
	pidNamespaces.mu.Unlock()
	if len(inits) == 0 {
		return
	}
	for _, pid := range children() {
		state, _, ok := procStat(pid)
		if !ok || state != 'Z' {
			continue
		}
		ns, err := pidNamespace(pid)
		if err != nil {
			continue
		}
		if init, ok := inits[ns]; !ok || init == pid {
			continue
		}
		for {
			var ws unix.WaitStatus
			if _, err := unix.Wait4(pid, &ws, unix.WNOHANG, nil); !errors.Is(err, unix.EINTR) {
				break
			}
		}
	}
}

// children lists the pids of this process's children (of every thread).
func children() []int {
	tasks, _ := filepath.Glob("/proc/self/task/*/children")
	var out []int
	for _, t := range tasks {
		b, err := os.ReadFile(t)
		if err != nil {
			continue
		}
		for _, f := range strings.Fields(string(b)) {
			if pid, err := strconv.Atoi(f); err == nil {
				out = append(out, pid)
			}
		}
	}
	return out
}
