package userns

import (
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"sync"
	"syscall"

	"golang.org/x/sys/unix"

	"github.com/shoal-run/shoal/internal/mountinfo"
)

// layers shows image layers to a range's root as its own.
type layers struct {
	mountDir, copyDir string
	copy              bool // shifted copies instead of idmapped mounts
	log               *slog.Logger

	mu    sync.Mutex
	locks map[string]*sync.Mutex // one per layer and range while it is made
}

// mapped returns the lower directories to use for layers in the range
// starting at host: each layer idmapped onto the range, or its shifted
// copy. A mount that something removed is made again.
func (l *layers) mapped(src []string, host uint32) ([]string, error) {
	out := make([]string, len(src))
	for i, s := range src {
		name := layerName(s)
		var err error
		if l.copy {
			out[i] = filepath.Join(rangeDir(l.copyDir, host), name)
			err = l.once(out[i], func() error { return shiftedCopy(s, out[i], host) })
		} else {
			out[i] = filepath.Join(rangeDir(l.mountDir, host), name)
			err = l.once(out[i], func() error { return idmapMount(s, out[i], host) })
		}
		if err != nil {
			return nil, fmt.Errorf("layer %s: %w", s, err)
		}
	}
	return out, nil
}

// once runs make for target unless another caller is making it; make
// itself checks whether target is already there.
func (l *layers) once(target string, make func() error) error {
	l.mu.Lock()
	if l.locks == nil {
		l.locks = map[string]*sync.Mutex{}
	}
	m, ok := l.locks[target]
	if !ok {
		m = &sync.Mutex{}
		l.locks[target] = m
	}
	l.mu.Unlock()
	m.Lock()
	defer m.Unlock()
	return make()
}

// drop unmounts and removes a released range's layers.
func (l *layers) drop(host uint32) error {
	return errors.Join(unmountTree(rangeDir(l.mountDir, host)), os.RemoveAll(rangeDir(l.copyDir, host)))
}

// unmountAll unmounts and removes every idmapped layer.
func (l *layers) unmountAll() error { return unmountTree(l.mountDir) }

// unmountTree detaches every mount under dir, then removes dir.
func unmountTree(dir string) error {
	mps, err := mountinfo.MountsUnder(dir)
	if err != nil {
		return err
	}
	var errs []error
	for i := len(mps) - 1; i >= 0; i-- {
		if err := unix.Unmount(mps[i], unix.MNT_DETACH); err != nil && !errors.Is(err, unix.EINVAL) && !errors.Is(err, unix.ENOENT) {
			errs = append(errs, fmt.Errorf("unmount %s: %w", mps[i], err))
		}
	}
	if len(errs) > 0 {
		return errors.Join(errs...)
	}
	return os.RemoveAll(dir)
}

// layerName names a layer's mapped directory: a hash of its path.
func layerName(src string) string {
	h := sha256.Sum256([]byte(filepath.Clean(src)))
	return hex.EncodeToString(h[:12])
}

// idmapMount mounts src at target idmapped onto the range starting at
// host, unless it is mounted there already.
func idmapMount(src, target string, host uint32) error {
	if isMapped(src, target, host) {
		return nil
	}
	if err := os.MkdirAll(target, 0o700); err != nil {
		return err
	}
	// A stale mount (another range's, or of a removed layer) goes first.
	if mps, _ := mountinfo.MountsUnder(target); len(mps) > 0 {
		for i := len(mps) - 1; i >= 0; i-- {
			unix.Unmount(mps[i], unix.MNT_DETACH)
		}
	}
	ns, err := nsOf(host)
	if err != nil {
		return err
	}
	defer ns.close()
	return mountIdmapped(src, target, ns.fd)
}

// mountIdmapped attaches a copy of the mount of src at target, its ids
// mapped through the user namespace nsfd.
func mountIdmapped(src, target string, nsfd int) error {
	fd, err := unix.OpenTree(unix.AT_FDCWD, src, unix.OPEN_TREE_CLONE|unix.OPEN_TREE_CLOEXEC)
	if err != nil {
		return fmt.Errorf("open_tree %s: %w", src, err)
	}
	defer unix.Close(fd)
	attr := unix.MountAttr{Attr_set: unix.MOUNT_ATTR_IDMAP | unix.MOUNT_ATTR_RDONLY, Userns_fd: uint64(nsfd)}
	if err := unix.MountSetattr(fd, "", unix.AT_EMPTY_PATH, &attr); err != nil {
		return fmt.Errorf("idmap %s: %w", src, err)
	}
	if err := unix.MoveMount(fd, "", unix.AT_FDCWD, target, unix.MOVE_MOUNT_F_EMPTY_PATH); err != nil {
		return fmt.Errorf("move_mount %s: %w", target, err)
	}
	return nil
}

// isMapped reports whether target shows src idmapped onto host's range:
// the same inode, its owner shifted.
func isMapped(src, target string, host uint32) bool {
	var s, t unix.Stat_t
	if unix.Stat(src, &s) != nil || unix.Stat(target, &t) != nil {
		return false
	}
	want := shift(s.Uid, host)
	return s.Dev == t.Dev && s.Ino == t.Ino && t.Uid == want
}

// shift is id's host id in the range starting at host; ids beyond the
// range are its nobody (65534).
func shift(id, host uint32) uint32 {
	if id >= Size {
		id = 65534
	}
	return host + id
}

// userNS keeps a user namespace mapped onto a range open, through a
// process that waits in it.
type userNS struct {
	fd    int
	stdin *os.File
	cmd   *exec.Cmd
}

// nsOf makes a user namespace whose ids 0..Size-1 are host..host+Size-1.
func nsOf(host uint32) (*userNS, error) {
	r, w, err := os.Pipe()
	if err != nil {
		return nil, err
	}
	cmd := exec.Command("/bin/cat")
	cmd.Stdin = r
	m := []syscall.SysProcIDMap{{ContainerID: 0, HostID: int(host), Size: Size}}
	cmd.SysProcAttr = &syscall.SysProcAttr{Cloneflags: syscall.CLONE_NEWUSER, UidMappings: m, GidMappings: m, Pdeathsig: syscall.SIGKILL}
	if err := cmd.Start(); err != nil {
		r.Close()
		w.Close()
		return nil, fmt.Errorf("user namespace of range %d: %w", host, err)
	}
	r.Close()
	fd, err := unix.Open("/proc/"+strconv.Itoa(cmd.Process.Pid)+"/ns/user", unix.O_RDONLY|unix.O_CLOEXEC, 0)
	ns := &userNS{fd: -1, stdin: w, cmd: cmd}
	if err != nil {
		ns.close()
		return nil, fmt.Errorf("user namespace of range %d: %w", host, err)
	}
	ns.fd = fd
	return ns, nil
}

func (n *userNS) close() {
	if n.fd >= 0 {
		unix.Close(n.fd)
	}
	n.stdin.Close()
	n.cmd.Process.Kill()
	n.cmd.Wait()
}
