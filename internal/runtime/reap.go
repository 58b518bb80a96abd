package runtime

import (
	"bufio"
	"bytes"
	"errors"
	"os"
	"strconv"
	"strings"

	"golang.org/x/sys/unix"
)

// A runtime process that dies before it is done (killed, or crashed) leaves
// its own children to the nearest subreaper, this process: a half-set-up
// container init from `runc create`, or the process of a `runc exec`. They
// sit in the container's cgroup, so they are found there and reaped, as
// nothing else would ever wait for them.

// orphans lists the children of this process, running or exited but not yet
// reaped, that are in cgroup cgroupsPath in some hierarchy; skip (a pid some
// watcher owns) is left out.
func orphans(cgroupsPath string, skip int) []int {
	self := os.Getpid()
	entries, err := os.ReadDir("/proc")
	if err != nil {
		return nil
	}
	var out []int
	for _, e := range entries {
		pid, err := strconv.Atoi(e.Name())
		if err != nil || pid == skip || pid == self {
			continue
		}
		if _, ppid, ok := procStat(pid); !ok || ppid != self {
			continue
		}
		if inCgroup(pid, cgroupsPath) {
			out = append(out, pid)
		}
	}
	return out
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

// reapOrphans kills and reaps the orphans of container id (see orphans) and
// returns how many there were.
func (r *Runtime) reapOrphans(id string, skip int) int {
	pids := orphans(r.host.cgroupsPath(id), skip)
	for _, pid := range pids {
		// The pid cannot be reused before it is reaped, and only this
		// function waits for it.
		_ = unix.Kill(pid, unix.SIGKILL)
		var ws unix.WaitStatus
		for {
			_, err := unix.Wait4(pid, &ws, 0, nil)
			if !errors.Is(err, unix.EINTR) {
				if err != nil {
					r.log.Warn("reap orphaned runtime child", "container", id, "pid", pid, "err", err)
				}
				break
			}
		}
		r.log.Debug("reaped orphaned runtime child", "container", id, "pid", pid)
	}
	return len(pids)
}
