package cgroups

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"
)

// childControllers are the v1 controllers a child cgroup is made in: those
// whose limits or counters belong to one run (memory, CPU time, pids) and
// the freezer that stops it before it is killed. In the others (cpuset,
// devices, ...) the run's processes stay in the parent's cgroup.
var childControllers = []string{"memory", "cpu", "cpuacct", "pids", "freezer"}

// ChildLimits are the limits of a child cgroup; zero leaves one to the
// parent's.
type ChildLimits struct {
	MemoryBytes int64
	Pids        int64
	CPUs        float64 // a CFS quota, in cores
}

// NestLeaf is the child of a v2 parent that holds the parent's own
// processes, since a v2 cgroup with children may hold none itself.
const NestLeaf = "init"

// Nest readies the cgroup to have children with limits of their own: on v2
// it moves the cgroup's processes into a leaf child and enables the memory,
// pids and cpu controllers for its children; on v1 there is nothing to do.
func (p Paths) Nest() error {
	if !p.V2 {
		return nil
	}
	leaf := filepath.Join(p.Unified, NestLeaf)
	if err := os.Mkdir(leaf, 0o755); err != nil && !errors.Is(err, fs.ErrExist) {
		return fmt.Errorf("cgroup %s: %w", leaf, err)
	}
	// Again while any is left: one may fork while the list is moved.
	for i := 0; ; i++ {
		procs, err := os.ReadFile(filepath.Join(p.Unified, "cgroup.procs"))
		if err != nil {
			return err
		}
		pids := strings.Fields(string(procs))
		if len(pids) == 0 {
			break
		}
		if i == 100 {
			return fmt.Errorf("cgroup %s: processes %v keep coming", p.Unified, pids)
		}
		for _, pid := range pids {
			if err := os.WriteFile(filepath.Join(leaf, "cgroup.procs"), []byte(pid), 0); err != nil && !errors.Is(err, syscall.ESRCH) {
				return fmt.Errorf("cgroup %s: move %s: %w", leaf, pid, err)
			}
		}
	}
	avail, err := os.ReadFile(filepath.Join(p.Unified, "cgroup.controllers"))
	if err != nil {
		return err
	}
	var enable []string
	for _, c := range strings.Fields(string(avail)) {
		if c == "memory" || c == "pids" || c == "cpu" {
			enable = append(enable, "+"+c)
		}
	}
	if len(enable) == 0 {
		return nil
	}
	file := filepath.Join(p.Unified, "cgroup.subtree_control")
	if err := os.WriteFile(file, []byte(strings.Join(enable, " ")), 0); err != nil {
		return fmt.Errorf("%s: %w", file, err)
	}
	return nil
}

// Child is the cgroup name below p, in the controllers a child is made in.
func (p Paths) Child(name string) Paths {
	c := Paths{V1: map[string]string{}, V2: p.V2}
	for _, ctl := range childControllers {
		if d, ok := p.V1[ctl]; ok && !p.V2 {
			c.V1[ctl] = filepath.Join(d, name)
		}
	}
	if p.Unified != "" {
		c.Unified = filepath.Join(p.Unified, name)
	}
	return c
}

// MakeChild makes the cgroup name below p (see Child) with limits l. On an
// error nothing is left.
func (p Paths) MakeChild(name string, l ChildLimits) (c Paths, err error) {
	c = p.Child(name)
	if !p.V2 {
		c.Unified = "" // the v2 hierarchy of a hybrid host has no controller
	}
	defer func() {
		if err != nil {
			c.Remove()
		}
	}()
	for _, d := range c.Dirs() {
		if err := os.Mkdir(d, 0o755); err != nil {
			return c, fmt.Errorf("cgroup %s: %w", d, err)
		}
	}
	return c, c.SetLimits(ChildLimits{}, l)
}

// SetLimits changes the limits of a child cgroup made by MakeChild from
// old (as they are) to l, writing only those that differ; a zero in l
// lifts that limit.
func (c Paths) SetLimits(old, l ChildLimits) error {
	if l.CPUs != old.CPUs {
		if err := c.SetCPUs(l.CPUs); err != nil {
			return err
		}
	}
	write := func(dir, file string, v int64, none string) error {
		val := none
		if v > 0 {
			val = strconv.FormatInt(v, 10)
		}
		f := filepath.Join(dir, file)
		if err := os.WriteFile(f, []byte(val), 0); err != nil {
			return fmt.Errorf("%s: %w", f, err)
		}
		return nil
	}
	if c.V2 {
		if l.MemoryBytes != old.MemoryBytes {
			if err := write(c.Unified, "memory.max", l.MemoryBytes, "max"); err != nil {
				return err
			}
			if l.MemoryBytes > 0 && old.MemoryBytes <= 0 {
				// No swap for the child either; a host without swap
				// accounting has no such file.
				f := filepath.Join(c.Unified, "memory.swap.max")
				if err := os.WriteFile(f, []byte("0"), 0); err != nil && !errors.Is(err, fs.ErrNotExist) {
					return fmt.Errorf("%s: %w", f, err)
				}
			}
		}
		if l.Pids != old.Pids {
			return write(c.Unified, "pids.max", l.Pids, "max")
		}
		return nil
	}
	if d, ok := c.V1["memory"]; ok && l.MemoryBytes != old.MemoryBytes {
		// Memory and swap together (memsw) never below memory alone: the
		// larger limit is written first when raising, last when lowering.
		files := []string{"memory.limit_in_bytes"}
		if _, err := os.Stat(filepath.Join(d, "memory.memsw.limit_in_bytes")); err == nil {
			files = append(files, "memory.memsw.limit_in_bytes")
			if old.MemoryBytes > 0 && (l.MemoryBytes <= 0 || l.MemoryBytes > old.MemoryBytes) {
				files[0], files[1] = files[1], files[0]
			}
		}
		for _, f := range files {
			if err := write(d, f, l.MemoryBytes, "-1"); err != nil {
				return err
			}
		}
	}
	if d, ok := c.V1["pids"]; ok && l.Pids != old.Pids {
		if err := write(d, "pids.max", l.Pids, "max"); err != nil {
			return err
		}
	}
	return nil
}

// Attach moves process pid (with all its threads) into the cgroup, in
// every hierarchy of p.
func (p Paths) Attach(pid int) error {
	for _, d := range p.Dirs() {
		f := filepath.Join(d, "cgroup.procs")
		if err := os.WriteFile(f, []byte(strconv.Itoa(pid)), 0); err != nil {
			return fmt.Errorf("%s: %w", f, err)
		}
	}
	return nil
}

// emptyPolls bounds how long Kill waits for the killed processes to go.
const emptyPolls = 400

// Kill kills every process of the cgroup: on v2 with cgroup.kill, or, on
// a kernel without it (before 5.14), as on v1; on v1 by freezing the
// cgroup (so that none forks while the list is read), sending SIGKILL to
// each and thawing it, also if the freeze failed. It returns once the
// cgroup lists no process.
func (p Paths) Kill() error {
	dir := p.Unified
	if p.V2 {
		err := writeExisting(filepath.Join(p.Unified, killFile), "1")
		if errors.Is(err, fs.ErrNotExist) && isDir(p.Unified) {
			_, statErr := os.Stat(filepath.Join(p.Unified, "cgroup.freeze"))
			err = p.freezeKill(p.Unified, statErr == nil)
		}
		if err != nil {
			return fmt.Errorf("cgroup %s: kill: %w", p.Unified, err)
		}
	} else {
		d, err := p.dir("pids")
		if err != nil {
			return err
		}
		dir = d
		if empty(filepath.Join(d, "cgroup.procs")) {
			return nil
		}
		_, hasFreezer := p.V1["freezer"]
		if err := p.freezeKill(d, hasFreezer); err != nil {
			return err
		}
	}
	procs := filepath.Join(dir, "cgroup.procs")
	for i := 0; i < emptyPolls; i++ {
		if empty(procs) {
			return nil
		}
		if i%20 == 19 {
			killProcs(dir) // one forked between the list and the freeze
		}
		time.Sleep(100 * time.Microsecond * time.Duration(1+i/50))
	}
	return fmt.Errorf("cgroup %s: processes left after SIGKILL", dir)
}

// killFile is the v2 file whose write kills a cgroup's processes (a
// variable so that a test can play a kernel without it).
var killFile = "cgroup.kill"

// freezeKill sends SIGKILL to every process listed in dir's cgroup.procs,
// the cgroup frozen meanwhile if freeze. A freeze that does not complete
// (a process that does not stop) still leaves the rest to kill and the
// cgroup to thaw: the caller repeats the kills for any forked meanwhile.
func (p Paths) freezeKill(dir string, freeze bool) error {
	var frozeErr error
	if freeze {
		frozeErr = p.Freeze()
	}
	killProcs(dir)
	if freeze {
		if err := p.Thaw(); err != nil {
			return errors.Join(frozeErr, err)
		}
	}
	return nil
}

// writeExisting writes v to the file name, which must exist: a cgroup
// directory refuses to make a file (EACCES), so a missing one would not be
// told from one the caller may not write.
func writeExisting(name, v string) error {
	f, err := os.OpenFile(name, os.O_WRONLY, 0)
	if err != nil {
		return err
	}
	_, err = f.WriteString(v)
	return errors.Join(err, f.Close())
}

func isDir(path string) bool {
	fi, err := os.Stat(path)
	return err == nil && fi.IsDir()
}

// empty reports whether a cgroup.procs file lists no process (or is gone).
func empty(procs string) bool {
	b, err := os.ReadFile(procs)
	return err != nil || len(strings.TrimSpace(string(b))) == 0
}
