package jobs

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strconv"
	"strings"

	"golang.org/x/sys/unix"
)

// A job runs as the same user as its sandbox's process (Serve), so it may
// change, through prlimit, setpriority, sched_setaffinity,
// sched_setscheduler, sched_setattr, ioprio_set, /proc/1/oom_score_adj or (in a user
// namespace, whose root owns the /proc files of a process that is not
// dumpable) /proc/1/coredump_filter, what Serve's next children inherit,
// and /proc/1/autogroup, which the next job sees. The daemon reads all of that when the sandbox
// starts and again after every job, on every thread of Serve (any thread
// may start the next step), and drops a sandbox where any of it changed.

// procState is what a job could change of Serve: its resource limits, OOM
// score adjustment, core dump filter and autogroup (the process's), and
// each thread's scheduling (priority, nice, real-time priority, policy,
// the time slice it asks, utilization clamps, reset-on-fork), CPU and
// memory node affinity and I/O priority, which must be the same for every
// thread.
type procState struct {
	limits, oomAdj, core, autogroup string
	thread                          string
}

func readProcState(pid int) (procState, error) {
	dir := "/proc/" + strconv.Itoa(pid)
	var st procState
	b, err := os.ReadFile(dir + "/limits")
	if err != nil {
		return st, err
	}
	st.limits = string(b)
	if b, err = os.ReadFile(dir + "/oom_score_adj"); err != nil {
		return st, err
	}
	st.oomAdj = strings.TrimSpace(string(b))
	// Files a kernel may be built without.
	if st.core, err = readOptional(dir + "/coredump_filter"); err != nil {
		return st, err
	}
	if st.autogroup, err = readOptional(dir + "/autogroup"); err != nil {
		return st, err
	}
	tids, err := os.ReadDir(dir + "/task")
	if err != nil {
		return st, err
	}
	first := ""
	for _, t := range tids {
		tid, err := strconv.Atoi(t.Name())
		if err != nil {
			continue
		}
		s, err := threadState(filepath.Join(dir, "task", t.Name()), tid)
		if err != nil {
			return st, err
		}
		if first == "" {
			first, st.thread = t.Name(), s
		} else if s != st.thread {
			return st, fmt.Errorf("thread %d: %s, thread %s: %s", tid, s, first, st.thread)
		}
	}
	return st, nil
}

func threadState(dir string, tid int) (string, error) {
	b, err := os.ReadFile(dir + "/stat")
	if err != nil {
		return "", err
	}
	// Fields after the command's closing parenthesis, from field 3 (state).
	i := strings.LastIndexByte(string(b), ')')
	f := strings.Fields(string(b)[i+1:])
	if i < 0 || len(f) < 39 {
		return "", fmt.Errorf("%s/stat: malformed", dir)
	}
	sched := fmt.Sprintf("priority %s nice %s rt %s policy %s", f[15], f[16], f[37], f[38])
	status, err := os.ReadFile(dir + "/status")
	if err != nil {
		return "", err
	}
	var aff []string
	for _, line := range strings.Split(string(status), "\n") {
		if strings.HasPrefix(line, "Cpus_allowed_list:") || strings.HasPrefix(line, "Mems_allowed_list:") {
			aff = append(aff, strings.Join(strings.Fields(line), " "))
		}
	}
	io, _, e := unix.Syscall(unix.SYS_IOPRIO_GET, 1 /* IOPRIO_WHO_PROCESS */, uintptr(tid), 0)
	if e != 0 && e != unix.ESRCH {
		return "", fmt.Errorf("ioprio of thread %d: %w", tid, e)
	}
	// What /proc does not show: the time slice asked of the scheduler
	// (sched_setattr's runtime), utilization clamps, reset-on-fork.
	attr, err := unix.SchedGetAttr(tid, 0)
	if err != nil && !errors.Is(err, unix.ESRCH) {
		return "", fmt.Errorf("scheduling attributes of thread %d: %w", tid, err)
	}
	var a unix.SchedAttr
	if attr != nil {
		a = *attr
	}
	return fmt.Sprintf("%s; %s; ioprio %d; slice %d flags %#x util %d-%d", sched, strings.Join(aff, "; "), io,
		a.Runtime, a.Flags, a.Util_min, a.Util_max), nil
}

// changed says what differs between st, as Serve started, and now.
func (st procState) changed(now procState) string {
	switch {
	case now.limits != st.limits:
		return "its resource limits"
	case now.oomAdj != st.oomAdj:
		return "its OOM score adjustment " + now.oomAdj
	case now.core != st.core:
		return "its core dump filter " + now.core
	case now.autogroup != st.autogroup:
		return "its autogroup " + now.autogroup
	case now.thread != st.thread:
		return "its scheduling, affinity or I/O priority: " + now.thread
	}
	return ""
}

// readOptional reads a file of /proc, "" if the kernel has none.
func readOptional(name string) (string, error) {
	b, err := os.ReadFile(name)
	if errors.Is(err, fs.ErrNotExist) {
		return "", nil
	}
	return strings.TrimSpace(string(b)), err
}
