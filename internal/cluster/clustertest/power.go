package clustertest

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/shoal-run/shoal/internal/mountinfo"
	"github.com/shoal-run/shoal/internal/userns"
)

// PowerOff is the node's machine dying: every process of the node (its
// daemon, its proxy, every replica and job) is killed with SIGKILL and its
// link goes down, so that its peers' packets to it are lost rather than
// refused. What it leaves on disk stays, as after a power cut.
func (nd *Node) PowerOff() error {
	if err := ip("link", "set", nd.Veth, "down"); err != nil {
		return err
	}
	nd.Kill()
	return nd.killAll()
}

// PowerOn brings the link of a node that was powered off back up and
// starts its daemon on the same folders.
func (nd *Node) PowerOn(ctx context.Context) error {
	if err := ip("link", "set", nd.Veth, "up"); err != nil {
		return err
	}
	return nd.Start(ctx)
}

// SetLink sets the node's link up or down (a cut network) without touching
// its processes.
func (nd *Node) SetLink(up bool) error {
	state := "down"
	if up {
		state = "up"
	}
	return ip("link", "set", nd.Veth, state)
}

// killAll kills with SIGKILL every process in the node's network namespace
// and in its cgroups (the containers have namespaces of their own), until
// none is left.
func (nd *Node) killAll() error {
	var st syscall.Stat_t
	if err := syscall.Stat("/run/netns/"+nd.NetNS, &st); err != nil {
		return fmt.Errorf("node %s: namespace: %w", nd.Name, err)
	}
	netns := fmt.Sprintf("net:[%d]", st.Ino)
	for range 50 {
		nd.thaw()
		pids := nd.cgroupPids()
		procs, _ := os.ReadDir("/proc")
		for _, p := range procs {
			pid, err := strconv.Atoi(p.Name())
			if err != nil {
				continue
			}
			if link, err := os.Readlink(filepath.Join("/proc", p.Name(), "ns", "net")); err == nil && link == netns {
				pids = append(pids, pid)
			}
		}
		if len(pids) == 0 {
			return nil
		}
		for _, pid := range pids {
			syscall.Kill(pid, syscall.SIGKILL)
		}
		time.Sleep(20 * time.Millisecond)
	}
	return fmt.Errorf("node %s: processes still alive after SIGKILL: %v", nd.Name, nd.cgroupPids())
}

// thaw thaws the node's frozen cgroups: a frozen process does not die of
// SIGKILL until it is thawed.
func (nd *Node) thaw() {
	for _, d := range nd.cgroupDirs() {
		os.WriteFile(filepath.Join(d, "freezer.state"), []byte("THAWED"), 0)
		os.WriteFile(filepath.Join(d, "cgroup.freeze"), []byte("0"), 0)
	}
}

// cgroupDirs are the node's cgroup folders in every hierarchy, its jobs'
// too, deepest first.
func (nd *Node) cgroupDirs() []string {
	roots, _ := filepath.Glob("/sys/fs/cgroup/*")
	roots = append(roots, "/sys/fs/cgroup")
	var dirs []string
	for _, r := range roots {
		for _, parent := range []string{nd.Cgroup, nd.Cgroup + "-jobs"} {
			filepath.WalkDir(filepath.Join(r, parent), func(p string, d os.DirEntry, err error) error {
				if err == nil && d.IsDir() {
					dirs = append(dirs, p)
				}
				return nil
			})
		}
	}
	slices.SortFunc(dirs, func(a, b string) int { return strings.Count(b, "/") - strings.Count(a, "/") })
	return dirs
}

// cgroupPids lists the processes in the node's cgroups.
func (nd *Node) cgroupPids() []int {
	var pids []int
	for _, d := range nd.cgroupDirs() {
		b, err := os.ReadFile(filepath.Join(d, "cgroup.procs"))
		if err != nil {
			continue
		}
		for _, f := range strings.Fields(string(b)) {
			if pid, err := strconv.Atoi(f); err == nil {
				pids = append(pids, pid)
			}
		}
	}
	return pids
}

// scrub removes everything of the node: its processes, the mounts under
// its folders (container roots, the namespace folder) and its apps'
// idmapped layers, its cgroups, and its folders.
func (nd *Node) scrub(base string) error {
	nd.Stop()
	var errs []error
	if err := nd.killAll(); err != nil {
		errs = append(errs, err)
	}
	ms, err := mountinfo.Self()
	if err != nil {
		errs = append(errs, err)
	}
	under := mountinfo.Under(ms, base)
	// A file system mounted elsewhere from the node's folders (a replica's
	// root file system, exposed under /run for its user namespace) keeps
	// them, and their disks' loop devices, in use.
	for _, m := range ms {
		if !strings.HasPrefix(m.Point, base+"/") && strings.Contains(m.SuperOptions, "="+base+"/") {
			under = append(under, m)
		}
	}
	for i := len(under) - 1; i >= 0; i-- {
		if err := syscall.Unmount(under[i].Point, syscall.MNT_DETACH); err != nil && !errors.Is(err, syscall.EINVAL) && !errors.Is(err, syscall.ENOENT) {
			errs = append(errs, fmt.Errorf("node %s: unmount %s: %w", nd.Name, under[i].Point, err))
		}
	}
	// The idmapped layers of its apps, which a daemon killed and not
	// started again left mounted outside its folders.
	if err := userns.RemoveLayers(userns.LayersDir(nd.DataDir)); err != nil {
		errs = append(errs, fmt.Errorf("node %s: %w", nd.Name, err))
	}
	for _, d := range nd.cgroupDirs() {
		if err := os.Remove(d); err != nil && !os.IsNotExist(err) {
			errs = append(errs, fmt.Errorf("node %s: cgroup: %w", nd.Name, err))
		}
	}
	if err := os.RemoveAll(base); err != nil {
		errs = append(errs, fmt.Errorf("node %s: %w", nd.Name, err))
	}
	return errors.Join(errs...)
}
