package runtime

import (
	"bufio"
	"bytes"
	"errors"
	"os"
	"strconv"
	"strings"
	"time"

	"golang.org/x/sys/unix"
)

// A runtime process that dies before it is done (killed, or crashed) leaves
// its own children to the nearest subreaper, this process: a half-set-up
// container init from `runc create`, or the process of a `runc exec`. Nothing
// else would ever wait for them. While they run they sit in the container's
// cgroup; once exited, a zombie shows no cgroup on v1, so runc's own init
// processes (named "runc:[N:...]" until they exec) are recognised by name.

// orphans lists the children of this process, running or exited but not yet
// reaped, that are in cgroup cgroupsPath in some hierarchy, or that are
// exited runc init processes; pids in skip (owned by a watcher) and the
// container's helpers (AttachHelper) are left out.
func orphans(cgroupsPath string, skip map[int]bool) []int {
	self := os.Getpid()
	entries, err := os.ReadDir("/proc")
	if err != nil {
		return nil
	}
	var out []int
	for _, e := range entries {
		pid, err := strconv.Atoi(e.Name())
		if err != nil || skip[pid] || pid == self {
			continue
		}
		state, ppid, ok := procStat(pid)
		if !ok || ppid != self {
			continue
		}
		if (inCgroup(pid, cgroupsPath) && !isHelper(pid, cgroupsPath)) || (state == 'Z' && isRuncInit(pid)) {
			out = append(out, pid)
		}
	}
	return out
}

// isRuncInit reports whether pid is one of runc's init stages, which have
// not yet exec'd the container's program.
func isRuncInit(pid int) bool {
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/comm")
	return err == nil && bytes.HasPrefix(b, []byte("runc:["))
}

// procStat reads the state letter and parent pid of pid.
func procStat(pid int) (state byte, ppid int, ok bool) {
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
	if err != nil {
		return 0, 0, false
	}
	// The command name may hold spaces and parentheses; fields resume
	// after the last ')'.
	i := bytes.LastIndexByte(b, ')')
	if i < 0 {
		return 0, 0, false
	}
	f := strings.Fields(string(b[i+1:]))
	if len(f) < 2 || len(f[0]) != 1 {
		return 0, 0, false
	}
	ppid, err = strconv.Atoi(f[1])
	if err != nil {
		return 0, 0, false
	}
	return f[0][0], ppid, true
}

// inCgroup reports whether pid is in cgroup path (or below it) in any
// hierarchy.
func inCgroup(pid int, path string) bool {
	f, err := os.Open("/proc/" + strconv.Itoa(pid) + "/cgroup")
	if err != nil {
		return false
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		parts := strings.SplitN(sc.Text(), ":", 3)
		if len(parts) != 3 {
			continue
		}
		p := strings.TrimSuffix(parts[2], " (deleted)")
		if p == path || strings.HasPrefix(p, path+"/") {
			return true
		}
	}
	return false
}

// reapOrphans kills and reaps the orphans of container id (see orphans)
// and returns how many there were. Container inits that a watcher waits for
// are left alone.
func (r *Runtime) reapOrphans(id string) int {
	pids := orphans(r.host.cgroupsPath(id), r.watchedPids())
	for _, pid := range pids {
		// The pid cannot be reused before it is reaped, and only this
		// function waits for it.
		_ = unix.Kill(pid, unix.SIGKILL)
		reaped := false
		for i := 0; i < 500 && !reaped; i++ {
			var ws unix.WaitStatus
			got, err := unix.Wait4(pid, &ws, unix.WNOHANG, nil)
			switch {
			case errors.Is(err, unix.EINTR):
			case errors.Is(err, unix.ECHILD):
				reaped = true // the pid namespace reaper was first (pidns.go)
			case err != nil:
				r.log.Warn("reap orphaned runtime child", "container", id, "pid", pid, "err", err)
				reaped = true
			case got == pid:
				reaped = true
			default:
				time.Sleep(time.Millisecond * time.Duration(1+i/50))
			}
		}
		if !reaped {
			r.log.Warn("orphaned runtime child does not exit", "container", id, "pid", pid)
		}
		r.log.Debug("reaped orphaned runtime child", "container", id, "pid", pid)
	}
	return len(pids)
}

// watchedPids are the container inits whose exit a watcher waits for.
func (r *Runtime) watchedPids() map[int]bool {
	r.mu.Lock()
	cs := make([]*ctr, 0, len(r.ctrs))
	for _, c := range r.ctrs {
		cs = append(cs, c)
	}
	r.mu.Unlock()
	out := map[int]bool{}
	for _, c := range cs {
		c.mu.Lock()
		if c.watching && c.pidfd != nil {
			out[c.rec.Pid] = true
		}
		c.mu.Unlock()
	}
	return out
}
