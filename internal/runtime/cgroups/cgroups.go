// Package cgroups finds a container's cgroup directories on cgroup v1, v2 and
// hybrid hosts and reads and writes the few files shoal needs there: the
// freezer, the CPU quota and the counters behind container stats. It spawns no
// process; everything is a file read or write.
package cgroups

import (
	"bufio"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"slices"
	"sort"
	"strings"

	"github.com/shoal-run/shoal/internal/mountinfo"
)

// Mode values returned by Layout.Mode.
const (
	ModeV1     = "v1"
	ModeV2     = "v2"
	ModeHybrid = "hybrid"
)

// Mount is one mounted cgroup hierarchy.
type Mount struct {
	// Point is where the hierarchy is mounted, e.g. /sys/fs/cgroup/memory.
	Point string
	// Root is the cgroup the mount shows at Point (field 4 of mountinfo),
	// "/" outside a cgroup namespace.
	Root string
	// Controllers are the v1 controllers (and "name=..." hierarchies) of the
	// mount; empty for the v2 hierarchy.
	Controllers []string
	// V2 reports a cgroup2 mount.
	V2 bool
}

// Layout is the set of cgroup hierarchies of a host.
type Layout struct {
	// V1 maps each v1 controller (or name=...) to its mount.
	V1 map[string]Mount
	// Unified is the cgroup2 mount, if any.
	Unified *Mount
}

// ReadLayout parses /proc/self/mountinfo.
func ReadLayout() (*Layout, error) {
	f, err := os.Open("/proc/self/mountinfo")
	if err != nil {
		return nil, fmt.Errorf("cgroup layout: %w", err)
	}
	defer f.Close()
	return ParseMountinfo(f)
}

// ParseMountinfo builds a Layout from mountinfo text.
func ParseMountinfo(r io.Reader) (*Layout, error) {
	ms, err := mountinfo.Parse(r)
	if err != nil {
		return nil, err
	}
	l := &Layout{V1: map[string]Mount{}}
	for _, mi := range ms {
		m := Mount{Root: mi.Root, Point: mi.Point}
		switch mi.FSType {
		case "cgroup2":
			m.V2 = true
			if l.Unified == nil {
				mm := m
				l.Unified = &mm
			}
		case "cgroup":
			for _, opt := range strings.Split(mi.SuperOptions, ",") {
				if isController(opt) {
					m.Controllers = append(m.Controllers, opt)
				}
			}
			for _, c := range m.Controllers {
				if _, ok := l.V1[c]; !ok {
					l.V1[c] = m
				}
			}
		}
	}
	if len(l.V1) == 0 && l.Unified == nil {
		return nil, errors.New("mountinfo: no cgroup hierarchy mounted")
	}
	return l, nil
}

func isController(opt string) bool {
	switch opt {
	case "rw", "ro", "relatime", "noatime", "nosuid", "nodev", "noexec", "clone_children", "xattr", "noprefix", "cpuset_v2_mode", "favordynmods":
		return false
	}
	if strings.HasPrefix(opt, "name=") {
		return true
	}
	return !strings.Contains(opt, "=")
}

// Mode tells whether the host is cgroup v1, v2 (unified only) or hybrid (v1
// controllers with a cgroup2 mount beside them).
func (l *Layout) Mode() string {
	switch {
	case len(l.V1) == 0:
		return ModeV2
	case l.Unified != nil:
		return ModeHybrid
	}
	return ModeV1
}

// V2Only reports whether the unified hierarchy holds the controllers, which
// is when runc and crun use cgroup v2 files.
func (l *Layout) V2Only() bool { return l.Mode() == ModeV2 }

// CPUSetSupported reports whether cgroups here can pin their tasks to CPUs:
// the v1 cpuset controller is mounted (v1 and hybrid hosts), or, on a v2
// host, the root of the unified hierarchy offers the cpuset controller.
func (l *Layout) CPUSetSupported() bool {
	if !l.V2Only() {
		_, ok := l.V1["cpuset"]
		return ok
	}
	b, err := os.ReadFile(filepath.Join(l.Unified.Point, "cgroup.controllers"))
	return err == nil && slices.Contains(strings.Fields(string(b)), "cpuset")
}

// CPUSet reads the CPUs the cgroup's tasks may run on (the kernel's list
// format, as cpuset.effective_cpus on v1 or cpuset.cpus.effective on v2).
func (p Paths) CPUSet() (string, error) {
	name := "cpuset.effective_cpus"
	if p.V2 {
		name = "cpuset.cpus.effective"
	}
	d, err := p.dir("cpuset")
	if err != nil {
		return "", err
	}
	b, err := os.ReadFile(filepath.Join(d, name))
	if err != nil {
		return "", err
	}
	return strings.TrimSpace(string(b)), nil
}

// Paths are the directories of one cgroup in every hierarchy.
type Paths struct {
	// V1 maps controller to directory (only on v1 and hybrid hosts).
	V1 map[string]string
	// Unified is the directory in the cgroup2 hierarchy ("" if none).
	Unified string
	// V2 reports that the controllers live in Unified.
	V2 bool
}

// Paths returns the directories of the cgroup at path (an absolute cgroup
// path such as /shoal/<id>) in every mounted hierarchy.
func (l *Layout) Paths(path string) Paths {
	p := Paths{V1: map[string]string{}, V2: l.V2Only()}
	for c, m := range l.V1 {
		p.V1[c] = join(m, path)
	}
	if l.Unified != nil {
		p.Unified = join(*l.Unified, path)
	}
	return p
}

func join(m Mount, path string) string {
	rel := path
	if m.Root != "/" && (rel == m.Root || strings.HasPrefix(rel, m.Root+"/")) {
		rel = strings.TrimPrefix(rel, m.Root)
	}
	return filepath.Join(m.Point, rel)
}

// Dirs returns every distinct directory of p, sorted.
func (p Paths) Dirs() []string {
	seen := map[string]bool{}
	var out []string
	for _, d := range p.V1 {
		if !seen[d] {
			seen[d] = true
			out = append(out, d)
		}
	}
	if p.Unified != "" && !seen[p.Unified] {
		out = append(out, p.Unified)
	}
	sort.Strings(out)
	return out
}

// dir returns the directory holding a v1 controller's files, or the unified
// directory on v2.
func (p Paths) dir(controller string) (string, error) {
	if p.V2 {
		if p.Unified == "" {
			return "", errors.New("no cgroup2 hierarchy")
		}
		return p.Unified, nil
	}
	d, ok := p.V1[controller]
	if !ok {
		return "", fmt.Errorf("cgroup v1 controller %q is not mounted", controller)
	}
	return d, nil
}

// ProcessCgroup parses /proc/<pid>/cgroup text into hierarchy → path ("" is
// the v2 hierarchy; each v1 controller of a line gets its own entry).
func ProcessCgroup(r io.Reader) (map[string]string, error) {
	out := map[string]string{}
	sc := bufio.NewScanner(r)
	for sc.Scan() {
		parts := strings.SplitN(sc.Text(), ":", 3)
		if len(parts) != 3 {
			continue
		}
		if parts[1] == "" {
			out[""] = parts[2]
			continue
		}
		for _, c := range strings.Split(parts[1], ",") {
			out[c] = parts[2]
		}
	}
	return out, sc.Err()
}
