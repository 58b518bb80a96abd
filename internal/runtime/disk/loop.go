// Package disk gives a container's writable layer a file system of its
// own: an ext4 file system in a sparse file of the container's size,
// attached to a loop device and mounted, so that a container that writes
// past its size gets ENOSPC instead of filling the file system its files
// live on. A Pool keeps a few images made ahead (mkfs.ext4 costs about 40
// ms), so that a container's start only attaches and mounts one.
//
// Loop devices are found and attached with the kernel's own calls
// (/dev/loop-control's LOOP_CTL_GET_FREE, then LOOP_CONFIGURE, or
// LOOP_SET_FD and LOOP_SET_STATUS64 on kernels before 5.8), set to clear
// themselves (LO_FLAGS_AUTOCLEAR): the device goes when its mount does,
// and a process that dies between the attach and the mount leaves none.
package disk

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"

	"golang.org/x/sys/unix"
)

// loopMajor is the loop driver's block device major number.
const loopMajor = 7

// Mount attaches image to a free loop device and mounts its ext4 file
// system at dir. The loop device clears itself once the mount is gone, so
// unmounting dir (and removing image) leaves nothing behind.
func Mount(image, dir string) error {
	back, err := os.OpenFile(image, os.O_RDWR|unix.O_CLOEXEC, 0)
	if err != nil {
		return fmt.Errorf("disk %s: %w", image, err)
	}
	defer back.Close()
	dev, lo, err := attach(back, image)
	if err != nil {
		return fmt.Errorf("disk %s: %w", image, err)
	}
	// Closed only after the mount: with autoclear, the last close of an
	// unmounted device detaches it.
	defer lo.Close()
	if err := unix.Mount(dev, dir, "ext4", unix.MS_NOATIME, "noinit_itable"); err != nil {
		return fmt.Errorf("disk %s: mount %s at %s: %w", image, dev, dir, err)
	}
	return nil
}

// attach binds back to a free loop device and returns the device's path
// and an open descriptor of it.
func attach(back *os.File, name string) (string, *os.File, error) {
	ctl, err := os.OpenFile("/dev/loop-control", os.O_RDWR|unix.O_CLOEXEC, 0)
	if err != nil {
		return "", nil, fmt.Errorf("loop devices: %w", err)
	}
	defer ctl.Close()
	var lastErr error
	// Another process may take the free device between the two calls
	// (EBUSY): ask again.
	for tries := 0; tries < 100; tries++ {
		n, err := unix.IoctlRetInt(int(ctl.Fd()), unix.LOOP_CTL_GET_FREE)
		if err != nil {
			return "", nil, fmt.Errorf("find a free loop device: %w", err)
		}
		dev := fmt.Sprintf("/dev/loop%d", n)
		lo, err := openLoop(dev, n)
		if err != nil {
			return "", nil, err
		}
		err = configure(lo, back, name)
		if err == nil {
			return dev, lo, nil
		}
		lo.Close()
		if !errors.Is(err, unix.EBUSY) {
			return "", nil, fmt.Errorf("attach %s: %w", dev, err)
		}
		lastErr = err
	}
	return "", nil, fmt.Errorf("attach a loop device: %w", lastErr)
}

// openLoop opens loop device n, making its node when /dev has none (a
// /dev that is not devtmpfs).
func openLoop(dev string, n int) (*os.File, error) {
	lo, err := os.OpenFile(dev, os.O_RDWR|unix.O_CLOEXEC, 0)
	if errors.Is(err, os.ErrNotExist) {
		if err := unix.Mknod(dev, unix.S_IFBLK|0o660, int(unix.Mkdev(loopMajor, uint32(n)))); err != nil && !errors.Is(err, os.ErrExist) {
			return nil, fmt.Errorf("make %s: %w", dev, err)
		}
		lo, err = os.OpenFile(dev, os.O_RDWR|unix.O_CLOEXEC, 0)
	}
	if err != nil {
		return nil, fmt.Errorf("open %s: %w", dev, err)
	}
	return lo, nil
}

// configure binds back to the loop device lo, set to clear itself.
func configure(lo, back *os.File, name string) error {
	var info unix.LoopInfo64
	info.Flags = unix.LO_FLAGS_AUTOCLEAR
	copy(info.File_name[:len(info.File_name)-1], filepath.Base(name))
	cfg := unix.LoopConfig{Fd: uint32(back.Fd()), Info: info}
	err := unix.IoctlLoopConfigure(int(lo.Fd()), &cfg)
	if !errors.Is(err, unix.EINVAL) && !errors.Is(err, unix.ENOTTY) {
		return err
	}
	// A kernel before 5.8: no LOOP_CONFIGURE.
	if err := unix.IoctlSetInt(int(lo.Fd()), unix.LOOP_SET_FD, int(back.Fd())); err != nil {
		return err
	}
	if err := unix.IoctlLoopSetStatus64(int(lo.Fd()), &info); err != nil {
		_ = unix.IoctlSetInt(int(lo.Fd()), unix.LOOP_CLR_FD, 0)
		return err
	}
	return nil
}
