package runtime

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"
)

// HelperCgroup is the child of a container's cgroup that holds its helpers:
// host processes that work for the container alone (a replica's log
// writer), charged to its limits but not among its processes: the runtime
// reaps none of them as a runtime's orphan, and lets them finish once the
// container's processes are gone before it removes the cgroup.
const HelperCgroup = "helpers"

// helperControllers are the v1 controllers a helper is charged in: its
// memory, CPU time (under the container's quota) and pids. In the others
// (freezer among them: a frozen container's helper still drains what the
// container wrote before) it stays where it was.
var helperControllers = []string{"memory", "cpu", "cpuacct", "pids"}

// AttachHelper moves pid, a host process working for container id, into
// the container's helper cgroup (HelperCgroup), made at the first call: its
// memory, CPU time and pids count against the container's limits. On v2
// the child enables no controller, so its use is the container's.
func (r *Runtime) AttachHelper(id string, pid int) error {
	if err := validID(id); err != nil {
		return fmt.Errorf("container %q: %w", id, err)
	}
	dirs := r.helperDirs(id)
	if len(dirs) == 0 {
		return fmt.Errorf("container %q: helper: no cgroup hierarchy to charge it in", id)
	}
	for _, d := range dirs {
		if _, err := os.Stat(filepath.Dir(d)); err != nil {
			return fmt.Errorf("container %q: helper: %w", id, err)
		}
		if err := os.Mkdir(d, 0o755); err != nil && !errors.Is(err, fs.ErrExist) {
			return fmt.Errorf("container %q: helper cgroup: %w", id, err)
		}
		f := filepath.Join(d, "cgroup.procs")
		if err := os.WriteFile(f, []byte(strconv.Itoa(pid)), 0); err != nil {
			return fmt.Errorf("container %q: helper %d: %s: %w", id, pid, f, err)
		}
	}
	return nil
}

// helperDirs are the directories of container id's helper cgroup: in the
// helper controllers on v1 and hybrid hosts (whose v2 hierarchy holds no
// controller), in the unified hierarchy on v2.
func (r *Runtime) helperDirs(id string) []string {
	p := r.cgroupPaths(id)
	var out []string
	if p.V2 {
		if p.Unified != "" {
			out = append(out, filepath.Join(p.Unified, HelperCgroup))
		}
		return out
	}
	seen := map[string]bool{}
	for _, c := range helperControllers {
		if d, ok := p.V1[c]; ok && !seen[d] {
			seen[d] = true
			out = append(out, filepath.Join(d, HelperCgroup))
		}
	}
	return out
}

// helperGrace bounds how long the removal of a container waits for its
// helpers to end by themselves (a log writer drains its pipe, then sees
// its end) before the cgroup's removal kills them.
const helperGrace = 2 * time.Second

// awaitHelpers waits, up to helperGrace, for container id's helper cgroup
// to hold no process. The container's own processes are gone.
func (r *Runtime) awaitHelpers(id string) {
	dirs := r.helperDirs(id)
	if len(dirs) == 0 {
		return
	}
	procs := filepath.Join(dirs[0], "cgroup.procs")
	for deadline := time.Now().Add(helperGrace); ; time.Sleep(5 * time.Millisecond) {
		b, err := os.ReadFile(procs)
		if err != nil || len(strings.TrimSpace(string(b))) == 0 || time.Now().After(deadline) {
			return
		}
	}
}

// isHelper reports whether pid is in the helper cgroup of the container
// whose cgroup is cgroupsPath.
func isHelper(pid int, cgroupsPath string) bool {
	return inCgroup(pid, cgroupsPath+"/"+HelperCgroup)
}
