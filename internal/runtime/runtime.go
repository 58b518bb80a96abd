// Package runtime runs shoal's containers with an OCI runtime (runc, or crun
// where it works). For each container it writes an OCI bundle whose root
// filesystem is an overlayfs over the image's layer directories, with cgroup
// limits, fresh namespaces, a small capability set, no_new_privs and a
// deny-by-default seccomp filter.
//
// The hot path is one runtime process per container start (`runc run
// --detach`) with the caller's stdio handed straight to the container. The
// daemon is a child subreaper (BecomeSubreaper), so the container's init
// becomes its child and its exit is seen through a pidfd in the Go netpoller,
// without a thread per container. A runtime process, once started, runs to
// the end even if the caller goes away, and whatever a runtime that died
// half-way leaves to the subreaper is killed and reaped. Freeze, thaw, CPU
// updates and stats write and read cgroup files directly (package cgroups),
// on cgroup v1, v2 and hybrid hosts.
//
// Every container is recorded in a RecordStore, so a restarted daemon adopts
// running containers with Recover and removes whatever is left of the rest:
// runtime state, overlay mounts, cgroups and bundles.
//
// Layout on disk:
//
//	<RuntimeRoot>.spec/<id>/config.json
//	                          OCI runtime spec, on the runtime's tmpfs:
//	                          the environment (secrets too) never on disk
//	<Root>/<id>/rootfs        overlay mount point
//	<Root>/<id>/upper, work   the container's writable layer, or with a
//	                          disk: <Root>/<id>/disk.img mounted at disk/,
//	                          holding upper and work (see disks.go)
//	<Root>/.disks/            disk images made ahead
//	<Root>/<id>/pid, runtime.log
//	<RuntimeRoot>/<id>/       the OCI runtime's own state
//	<cgroup mount>/shoal/<id> in every hierarchy
package runtime

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/shoal-run/shoal/internal/clock"
	"github.com/shoal-run/shoal/internal/errdefs"
	"github.com/shoal-run/shoal/internal/runtime/cgroups"
	"github.com/shoal-run/shoal/internal/runtime/disk"
)

// Options configure a Runtime.
type Options struct {
	// Root holds the bundles, e.g. /var/lib/shoal/containers.
	Root string
	// RuntimeRoot is the OCI runtime's --root (default /run/shoal/runc, or
	// /run/shoal/crun for crun).
	RuntimeRoot string
	// Runtime is "runc" (default), "crun" or "auto" (crun if it works on this
	// host, else runc).
	Runtime string
	// Records keep container records (default: in memory only).
	Records RecordStore
	// CgroupParent is the cgroup every container's cgroup is made under
	// (default DefaultCgroupParent). Recover treats every cgroup under it
	// that no record names as an orphan, so two Runtimes on one host must
	// not share it.
	CgroupParent string
	Clock        clock.Clock
	Logger       *slog.Logger
}

// Runtime creates and manages containers. It is safe for concurrent use.
//
// Runtime has more methods than a type here usually has (about 40, half of
// them unexported), on purpose: each exported one is one operation of a
// container's life (create, start, exec, signal, freeze, thaw, update,
// stats, delete, recover), and all of them share the one table of watched
// containers and its lock, which must not be split across types. They are
// grouped by operation in files of their own (lifecycle.go, exec.go,
// control.go, delete.go, wait.go, recover.go, ...).
type Runtime struct {
	name        string
	bin         string
	root        string
	runtimeRoot string
	records     RecordStore
	clock       clock.Clock
	log         *slog.Logger
	layout      *cgroups.Layout
	host        hostInfo

	criuConfState // see checkpoint.go

	disksOnce sync.Once
	disks     *disk.Pool // see disks.go
	disksErr  error

	mu   sync.Mutex
	ctrs map[string]*ctr
}

// Container describes a container.
type Container struct {
	ID      string
	Pid     int
	Bundle  string
	Created time.Time
	Labels  map[string]string
	// Status is "created", "running", "paused" or "stopped".
	Status    string
	NetNSPath string
	Runtime   string
}

// Container statuses.
const (
	StatusCreated = "created"
	StatusRunning = "running"
	StatusPaused  = "paused"
	StatusStopped = "stopped"
)

// ExitStatus is how a container's init process ended.
type ExitStatus struct {
	// Code is the exit code, or 128+signal when killed by a signal.
	Code   int
	Signal syscall.Signal
	// OOMKilled reports that the container ended because of the kernel's
	// OOM killer: the OOM kill count of its cgroup rose during the run AND
	// init was killed by SIGKILL or exited non-zero. A container whose init
	// exited 0 is not OOMKilled even if one of its other processes was;
	// Stats().OOMKills still counts every kill.
	OOMKilled bool
	// Known is false when the status could not be read: the container was
	// adopted after a restart, so it is not this process's child.
	Known bool
}

// New checks the runtime binary and the roots and returns a Runtime. It does
// not touch existing containers; call Recover for that.
func New(ctx context.Context, o Options) (*Runtime, error) {
	if o.Root == "" {
		return nil, errdefs.Invalid("root", "a state directory is needed")
	}
	if !filepath.IsAbs(o.Root) {
		return nil, errdefs.Invalid("root", "%q is not an absolute path", o.Root)
	}
	layout, err := hostLayout()
	if err != nil {
		return nil, fmt.Errorf("runtime: %w", err)
	}
	name := o.Runtime
	switch name {
	case "", "runc":
		name = "runc"
	case "crun":
		if err := CrunUsable(ctx); err != nil {
			return nil, err
		}
	case "auto":
		name = "runc"
		if CrunUsable(ctx) == nil {
			name = "crun"
		}
	default:
		return nil, errdefs.Invalid("runtime", "%q is not runc, crun or auto", o.Runtime)
	}
	bin, err := exec.LookPath(name)
	if err != nil {
		return nil, fmt.Errorf("runtime %s: %w", name, err)
	}
	var sealErr error
	if name == "runc" {
		bin, sealErr = sealedRunc(ctx, bin)
	}
	r := &Runtime{
		name: name, bin: bin, root: filepath.Clean(o.Root), runtimeRoot: o.RuntimeRoot,
		records: o.Records, clock: o.Clock, log: o.Logger, layout: layout,
		ctrs: map[string]*ctr{},
	}
	if r.runtimeRoot == "" {
		r.runtimeRoot = "/run/shoal/" + name
	}
	if r.records == nil {
		r.records = &MemRecords{}
	}
	if r.clock == nil {
		r.clock = clock.Real{}
	}
	if r.log == nil {
		r.log = slog.New(slog.DiscardHandler)
	}
	if sealErr != nil {
		r.log.Warn("runc copies its binary for every container", "err", sealErr)
	}
	r.host = hostInfo{rlimitHard: hostRlimits(), cgroupV2: layout.V2Only(), cgroupParent: DefaultCgroupParent}
	if o.CgroupParent != "" {
		p := "/" + strings.Trim(o.CgroupParent, "/")
		if p == "/" || strings.Contains(p, "..") {
			return nil, errdefs.Invalid("cgroup_parent", "%q is not a cgroup path such as /shoal", o.CgroupParent)
		}
		r.host.cgroupParent = p
	}
	if _, err := os.Stat("/proc/self/ns/cgroup"); err == nil {
		r.host.cgroupNS = true
	}
	for _, d := range []string{r.root, r.runtimeRoot, r.specRoot()} {
		if err := os.MkdirAll(d, 0o711); err != nil {
			return nil, fmt.Errorf("runtime: %w", err)
		}
	}
	return r, nil
}

// Name is the OCI runtime in use: "runc" or "crun".
func (r *Runtime) Name() string { return r.name }

// RuntimeRoot is the OCI runtime's state directory.
func (r *Runtime) RuntimeRoot() string { return r.runtimeRoot }

var (
	layoutOnce sync.Once
	layoutVal  *cgroups.Layout
	layoutErr  error
)

func hostLayout() (*cgroups.Layout, error) {
	layoutOnce.Do(func() { layoutVal, layoutErr = cgroups.ReadLayout() })
	return layoutVal, layoutErr
}

// CgroupMode is the host's cgroup mode: "v1", "v2" or "hybrid" ("" if no
// cgroup hierarchy is mounted).
func CgroupMode() string {
	l, err := hostLayout()
	if err != nil {
		return ""
	}
	return l.Mode()
}

// CPUSetSupported reports whether containers can be pinned to CPUs
// (Limits.CPUSet): the cpuset controller is mounted on cgroup v1 and hybrid
// hosts, or enabled in the root of the unified hierarchy on v2.
func (r *Runtime) CPUSetSupported() bool { return r.layout.CPUSetSupported() }

// cgroupPaths are the directories of container id's cgroup.
func (r *Runtime) cgroupPaths(id string) cgroups.Paths { return r.layout.Paths(r.host.cgroupsPath(id)) }

// DefaultCgroupParent is the cgroup containers are made under by default.
const DefaultCgroupParent = "/shoal"

func (r *Runtime) bundle(id string) string { return filepath.Join(r.root, id) }

// specRoot holds the containers' OCI runtime specs (the runtime's
// --bundle), beside RuntimeRoot: on a tmpfs (/run/shoal/runc.spec), as
// they hold each container's environment, secrets asked for in it among
// them. The root file system, the writable layer and the logs stay in
// the bundle under Root.
func (r *Runtime) specRoot() string { return r.runtimeRoot + ".spec" }

// specDir is container id's runtime bundle: its config.json, and an
// exec's process spec while the exec starts.
func (r *Runtime) specDir(id string) string { return filepath.Join(r.specRoot(), id) }

// get returns the live container id or ErrNotFound.
func (r *Runtime) get(id string) (*ctr, error) {
	r.mu.Lock()
	c := r.ctrs[id]
	if c != nil && c.rec.Pid == 0 {
		c = nil // still being created
	}
	r.mu.Unlock()
	if c == nil {
		return nil, fmt.Errorf("container %q: %w", id, errdefs.ErrNotFound)
	}
	return c, nil
}

var errExited = errors.New("container has exited")
