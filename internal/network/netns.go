package network

import (
	"errors"
	"fmt"
	"os"
	"runtime"
	"strings"

	"golang.org/x/sys/unix"

	"github.com/shoal-run/shoal/internal/mountinfo"
)

// threadNetNS is the nsfs file of the calling thread's network namespace.
func threadNetNS() string {
	return fmt.Sprintf("/proc/%d/task/%d/ns/net", os.Getpid(), unix.Gettid())
}

// createNetNS makes a new network namespace, brings its loopback up and keeps
// it alive by bind-mounting it onto path, which must not exist; with
// noTimeWait its TCP keeps no connection in TIME_WAIT (see None). On error
// nothing is left behind.
func createNetNS(path string, noTimeWait bool) error {
	f, err := os.OpenFile(path, os.O_RDONLY|os.O_CREATE|os.O_EXCL, 0o444)
	if err != nil {
		return fmt.Errorf("netns %s: %w", path, err)
	}
	f.Close()

	err = onThread(func() error {
		if err := unix.Unshare(unix.CLONE_NEWNET); err != nil {
			return fmt.Errorf("unshare netns: %w", err)
		}
		return nil
	}, func() error {
		if err := unix.Mount(threadNetNS(), path, "none", unix.MS_BIND, ""); err != nil {
			return fmt.Errorf("bind mount netns: %w", err)
		}
		if err := setLinkUp("lo"); err != nil {
			return fmt.Errorf("loopback up: %w", err)
		}
		if noTimeWait {
			// /proc/sys/net is the opening thread's namespace's.
			if err := os.WriteFile("/proc/sys/net/ipv4/tcp_max_tw_buckets", []byte("0"), 0); err != nil {
				return fmt.Errorf("no TIME_WAIT: %w", err)
			}
		}
		return nil
	})
	if err != nil {
		_ = destroyNetNS(path)
		return fmt.Errorf("netns %s: %w", path, err)
	}
	return nil
}

// destroyNetNS unmounts and removes a namespace file made by createNetNS.
// The kernel frees the namespace, and every interface in it, once no process
// is left inside. A missing file is not an error.
// isNetNS reports whether path is a namespace file: a mount of nsfs.
func isNetNS(path string) bool {
	var st unix.Statfs_t
	return unix.Statfs(path, &st) == nil && st.Type == unix.NSFS_MAGIC
}

func destroyNetNS(path string) error {
	err := unix.Unmount(path, unix.MNT_DETACH)
	if err != nil && !errors.Is(err, unix.EINVAL) && !errors.Is(err, unix.ENOENT) {
		return fmt.Errorf("netns %s: unmount: %w", path, err)
	}
	if err := os.Remove(path); err != nil && !errors.Is(err, os.ErrNotExist) {
		return fmt.Errorf("netns %s: %w", path, err)
	}
	return nil
}

// withNetNS runs fn on a thread that has joined the namespace at path.
// Sockets fn opens stay in that namespace and may be used from anywhere.
func withNetNS(path string, fn func() error) error {
	target, err := unix.Open(path, unix.O_RDONLY|unix.O_CLOEXEC, 0)
	if err != nil {
		return fmt.Errorf("netns %s: %w", path, err)
	}
	defer unix.Close(target)

	return onThread(func() error {
		if err := unix.Setns(target, unix.CLONE_NEWNET); err != nil {
			return fmt.Errorf("netns %s: setns: %w", path, err)
		}
		return nil
	}, fn)
}

// onThread runs enter and then fn on a locked OS thread whose network
// namespace enter changes. The thread goes back to the pool of threads only
// once it is back in its original namespace; otherwise it dies with the
// goroutine.
func onThread(enter, fn func() error) error {
	errc := make(chan error, 1)
	go func() {
		runtime.LockOSThread()
		orig, err := unix.Open(threadNetNS(), unix.O_RDONLY|unix.O_CLOEXEC, 0)
		if err != nil {
			runtime.UnlockOSThread()
			errc <- fmt.Errorf("open current netns: %w", err)
			return
		}
		defer unix.Close(orig)
		if err := enter(); err != nil {
			runtime.UnlockOSThread()
			errc <- err
			return
		}
		err = fn()
		if unix.Setns(orig, unix.CLONE_NEWNET) == nil {
			runtime.UnlockOSThread()
		}
		errc <- err
	}()
	return <-errc
}

// setLinkUp sets IFF_UP on the named interface of the calling thread's
// network namespace.
func setLinkUp(name string) error {
	fd, err := unix.Socket(unix.AF_INET, unix.SOCK_DGRAM|unix.SOCK_CLOEXEC, 0)
	if err != nil {
		return err
	}
	defer unix.Close(fd)
	ifr, err := unix.NewIfreq(name)
	if err != nil {
		return err
	}
	if err := unix.IoctlIfreq(fd, unix.SIOCGIFFLAGS, ifr); err != nil {
		return fmt.Errorf("%s: get flags: %w", name, err)
	}
	ifr.SetUint16(ifr.Uint16() | unix.IFF_UP)
	if err := unix.IoctlIfreq(fd, unix.SIOCSIFFLAGS, ifr); err != nil {
		return fmt.Errorf("%s: set flags: %w", name, err)
	}
	return nil
}

// makeShared makes dir a shared mount point, binding it onto itself first
// when it is not a mount point yet (as `ip netns` does with /run/netns).
// Namespace mounts below it then propagate to the mount namespaces runc
// makes for containers, and so do their unmounts, so a copy there never
// pins a namespace that was released. It reports whether it made the bind.
func makeShared(dir string) (bound bool, err error) {
	err = unix.Mount("", dir, "none", unix.MS_SHARED|unix.MS_REC, "")
	if err == nil {
		// A bind of dir onto itself that a daemon killed before it could
		// undo it left: it is this manager's to undo now.
		return selfBound(dir), nil
	}
	if !errors.Is(err, unix.EINVAL) {
		return false, fmt.Errorf("state dir %s: make shared: %w", dir, err)
	}
	if err := unix.Mount(dir, dir, "none", unix.MS_BIND|unix.MS_REC, ""); err != nil {
		return false, fmt.Errorf("state dir %s: bind onto itself: %w", dir, err)
	}
	if err := unix.Mount("", dir, "none", unix.MS_SHARED|unix.MS_REC, ""); err != nil {
		_ = unix.Unmount(dir, unix.MNT_DETACH)
		return false, fmt.Errorf("state dir %s: make shared: %w", dir, err)
	}
	return true, nil
}

// selfBound reports whether the topmost mount at dir binds dir onto
// itself: the same filesystem as the mount below it, showing the directory
// dir is in it.
func selfBound(dir string) bool {
	ms, err := mountinfo.Self()
	if err != nil {
		return false
	}
	byID := make(map[int]mountinfo.Mount, len(ms))
	var top *mountinfo.Mount
	for i, m := range ms {
		byID[m.ID] = m
		if m.Point == dir {
			top = &ms[i] // later lines are mounted on top
		}
	}
	if top == nil || top.Root == "/" {
		return false
	}
	parent, ok := byID[top.Parent]
	return ok && parent.Dev == top.Dev && strings.HasSuffix(dir, top.Root)
}

// isMountPoint reports whether path is the mount point of an entry in
// /proc/self/mountinfo.
func isMountPoint(path string) (bool, error) { return mountinfo.IsMountPoint(path) }
