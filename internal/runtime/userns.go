package runtime

import (
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path"
	"path/filepath"
	goruntime "runtime"
	"strings"
	"syscall"

	"golang.org/x/sys/unix"

	"github.com/opencontainers/runtime-spec/specs-go"
)

// UserNS maps the container's uids and gids 0..Size-1 onto the host's
// HostID..HostID+Size-1, so that root in the container is an unprivileged
// user on the host.
//
// The container's init sets up its root filesystem from inside the new user
// namespace, so every directory on the path to the bundle must be
// searchable by HostID (or its group). The image layers stay owned by the
// host's root: inside the container they belong to nobody, readable but not
// writable. A user namespace cannot mount sysfs for a network namespace it
// does not own, so a container that joins an existing namespace
// (NetNSPath) gets no /sys.
type UserNS struct {
	HostID uint32
	Size   uint32
}

// applyUserNS adds the user namespace and its mappings to spec.
func applyUserNS(spec *specs.Spec, s *Spec) {
	u := s.UserNS
	if u == nil {
		return
	}
	m := []specs.LinuxIDMapping{{ContainerID: 0, HostID: u.HostID, Size: u.Size}}
	spec.Linux.UIDMappings, spec.Linux.GIDMappings = m, m
	spec.Linux.Namespaces = append(spec.Linux.Namespaces, specs.LinuxNamespace{Type: specs.UserNamespace})
	if s.NetNSPath != "" {
		// The runtime is started in the network namespace instead (see
		// runtimeNetNS), and the container stays in it.
		ns := spec.Linux.Namespaces[:0]
		for _, n := range spec.Linux.Namespaces {
			if n.Type != specs.NetworkNamespace {
				ns = append(ns, n)
			}
		}
		spec.Linux.Namespaces = ns
		kept := spec.Mounts[:0]
		for _, mt := range spec.Mounts {
			if mt.Type != "sysfs" && mt.Destination != "/sys/fs/cgroup" {
				kept = append(kept, mt)
			}
		}
		spec.Mounts = kept
		masked := make([]string, 0, len(spec.Linux.MaskedPaths))
		for _, p := range spec.Linux.MaskedPaths {
			if len(p) < 5 || p[:5] != "/sys/" {
				masked = append(masked, p)
			}
		}
		spec.Linux.MaskedPaths = masked
	}
}

// UserNSUsable reports whether this host lets a process create a user
// namespace whose root is host uid hostID: it starts /bin/true in one.
func UserNSUsable(hostID, size uint32) error {
	bin := "/bin/true"
	if _, err := os.Stat(bin); err != nil {
		return fmt.Errorf("user namespace probe: %w", err)
	}
	cmd := exec.Command(bin)
	cmd.SysProcAttr = &syscall.SysProcAttr{
		Cloneflags:  syscall.CLONE_NEWUSER,
		UidMappings: []syscall.SysProcIDMap{{ContainerID: 0, HostID: int(hostID), Size: int(size)}},
		GidMappings: []syscall.SysProcIDMap{{ContainerID: 0, HostID: int(hostID), Size: int(size)}},
	}
	if out, err := cmd.CombinedOutput(); err != nil {
		return fmt.Errorf("user namespace with root as host uid %d: %w %s", hostID, err, out)
	}
	return nil
}

// prepareUserNS makes the mount points a user-namespaced container needs in
// its root filesystem, as the host's root, before the runtime runs: root in
// the container cannot create them in image directories owned by the
// host's root. Paths are resolved inside rootfs, never through a symlink
// out of it.
func prepareUserNS(rootfs string, s *Spec) error {
	if s.UserNS == nil {
		return nil
	}
	dirs := []string{"proc", "dev", "sys"}
	for _, m := range s.Mounts {
		d := strings.TrimPrefix(path.Clean(m.Destination), "/")
		if d != "" && d != "dev" && !strings.HasPrefix(d, "dev/") {
			dirs = append(dirs, d)
		}
	}
	root, err := os.OpenRoot(rootfs)
	if err != nil {
		return err
	}
	defer root.Close()
	for _, d := range dirs {
		if err := root.MkdirAll(d, 0o755); err != nil {
			return fmt.Errorf("mount point /%s: %w", d, err)
		}
	}
	// The root directory takes its owner from the (host root's) upper
	// directory: it is the container root's, as in the image.
	if err := os.Lchown(rootfs, int(s.UserNS.HostID), int(s.UserNS.HostID)); err != nil {
		return fmt.Errorf("root directory: %w", err)
	}
	return nil
}

// ExposeDir is where the root file systems of containers in a user
// namespace are shown to their init: its parents must be searchable by
// any host uid, as the bundle's (under the daemon's private data dir) need
// not be. Each one is <ExposeDir>/<hash of its bundle>/root, the hashed
// folder the host root's, searchable by the container root's host gid
// alone (0710).
var ExposeDir = "/run/shoal-userns/rootfs"

// exposeRootfs bind-mounts the bundle's root file system under ExposeDir
// and returns the path the runtime is to use.
func exposeRootfs(bundle string, hostID uint32) (string, error) {
	dir := exposedDir(bundle)
	for _, d := range []string{filepath.Dir(ExposeDir), ExposeDir} {
		if err := os.MkdirAll(d, 0o711); err != nil {
			return "", err
		}
		if err := os.Chmod(d, 0o711); err != nil {
			return "", err
		}
	}
	if err := os.Mkdir(dir, 0o710); err != nil && !errors.Is(err, os.ErrExist) {
		return "", err
	}
	if err := os.Chown(dir, 0, int(hostID)); err != nil {
		return "", err
	}
	if err := os.Chmod(dir, 0o710); err != nil {
		return "", err
	}
	root := filepath.Join(dir, "root")
	if err := os.Mkdir(root, 0o755); err != nil && !errors.Is(err, os.ErrExist) {
		return "", err
	}
	if err := unix.Mount(filepath.Join(bundle, "rootfs"), root, "", unix.MS_BIND, ""); err != nil {
		return "", fmt.Errorf("expose root file system at %s: %w", root, err)
	}
	return root, nil
}

// exposeMounts shows the sources of spec's bind mounts to the tasks of a
// container restored in a user namespace: CRIU binds them from inside
// that namespace, as its root (`runc run` opens them as the host's root
// first), and their parents need not be searchable by it. Each source is
// bind-mounted under the container's folder in ExposeDir (exposeRootfs's,
// searchable by the container's root alone) and named from there.
// unexposeRootfs unmounts them.
func exposeMounts(bundle string, spec *specs.Spec) error {
	dir := exposedDir(bundle)
	for i := range spec.Mounts {
		m := &spec.Mounts[i]
		if m.Type != "bind" {
			continue
		}
		fi, err := os.Stat(m.Source)
		if err != nil {
			return fmt.Errorf("mount %s: %w", m.Destination, err)
		}
		target := filepath.Join(dir, fmt.Sprintf("mount-%d", i))
		if fi.IsDir() {
			err = os.Mkdir(target, 0o700)
		} else {
			var f *os.File
			if f, err = os.OpenFile(target, os.O_CREATE|os.O_EXCL|os.O_WRONLY, 0o600); err == nil {
				err = f.Close()
			}
		}
		if err != nil {
			return fmt.Errorf("mount %s: %w", m.Destination, err)
		}
		if err := unix.Mount(m.Source, target, "", unix.MS_BIND|unix.MS_REC, ""); err != nil {
			return fmt.Errorf("mount %s: expose %s: %w", m.Destination, m.Source, err)
		}
		m.Source = target
	}
	return nil
}

// unexposeRootfs undoes exposeRootfs, if it was done.
func unexposeRootfs(bundle string) error {
	dir := exposedDir(bundle)
	if _, err := os.Lstat(dir); errors.Is(err, os.ErrNotExist) {
		return nil
	}
	if _, err := unmountAll(dir); err != nil {
		return err
	}
	return os.RemoveAll(dir)
}

// exposedDir is the folder of bundle's root file system under ExposeDir.
func exposedDir(bundle string) string {
	h := sha256.Sum256([]byte(filepath.Clean(bundle)))
	return filepath.Join(ExposeDir, hex.EncodeToString(h[:12]))
}

// runtimeNetNS is the network namespace the runtime is started in for s:
// its NetNSPath when s is in a user namespace, else none ("").
func runtimeNetNS(s *Spec) string {
	if s.UserNS == nil {
		return ""
	}
	return s.NetNSPath
}

// runtimeNetNSOf is the network namespace the runtime of container id
// (made with netns) runs in: netns when its config maps a user namespace,
// else none ("").
func (r *Runtime) runtimeNetNSOf(id, netns string) string {
	b, err := os.ReadFile(filepath.Join(r.specDir(id), "config.json"))
	if err != nil {
		return ""
	}
	var spec specs.Spec
	if json.Unmarshal(b, &spec) != nil || spec.Linux == nil || len(spec.Linux.UIDMappings) == 0 {
		return ""
	}
	return netns
}

// startIn starts cmd in the network namespace at path ("": this
// process's). The child is forked from a thread that joined the namespace
// for the fork; the thread then goes back, or, if it cannot, dies with its
// goroutine.
func startIn(cmd *exec.Cmd, path string) error {
	if path == "" {
		return cmd.Start()
	}
	target, err := unix.Open(path, unix.O_RDONLY|unix.O_CLOEXEC, 0)
	if err != nil {
		return fmt.Errorf("network namespace %s: %w", path, err)
	}
	defer unix.Close(target)
	errc := make(chan error, 1)
	go func() {
		goruntime.LockOSThread()
		orig, err := unix.Open(fmt.Sprintf("/proc/%d/task/%d/ns/net", os.Getpid(), unix.Gettid()), unix.O_RDONLY|unix.O_CLOEXEC, 0)
		if err != nil {
			goruntime.UnlockOSThread()
			errc <- fmt.Errorf("network namespace: %w", err)
			return
		}
		defer unix.Close(orig)
		if err := unix.Setns(target, unix.CLONE_NEWNET); err != nil {
			goruntime.UnlockOSThread()
			errc <- fmt.Errorf("network namespace %s: setns: %w", path, err)
			return
		}
		err = cmd.Start()
		if unix.Setns(orig, unix.CLONE_NEWNET) == nil {
			goruntime.UnlockOSThread()
		}
		errc <- err
	}()
	return <-errc
}
