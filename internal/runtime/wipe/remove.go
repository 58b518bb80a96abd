package wipe

import (
	"errors"
	"fmt"
	"io"
	"os"

	"golang.org/x/sys/unix"
)

// A job may leave a chain of directories as deep as its file system has
// inodes (a million in a /work of 4 GiB). Removing it level by level, as
// os.RemoveAll does, holds a descriptor and a stack frame per level: the
// daemon would run out of descriptors, or of stack, on what one job made.
// removeAll holds one directory open at a time instead: it goes down into
// the first directory not yet empty, and back up through ".." once that
// one is. Nor does it read a whole directory at once: a million names of
// 255 bytes would be a quarter of a GiB of the daemon's memory.

// removeAll removes the entry name of the directory root and, if it is a
// directory, everything below it, never following a symbolic link.
// Nothing else may change the tree meanwhile (the sandbox runs nothing
// between jobs).
func (d keptDir) removeAll(name string) error {
	f, err := d.root.Open(".")
	if err != nil {
		return err
	}
	defer f.Close()
	return removeAll(int(f.Fd()), name)
}

func removeAll(dir int, name string) error {
	if done, err := removeEntry(dir, name); done || err != nil {
		return err
	}
	f, err := openDir(dir, name)
	if err != nil {
		return err
	}
	depth := 0 // levels below name
	for {
		sub, err := clearDir(f, nil)
		if err == nil && sub != "" {
			var next *os.File
			if next, err = openDir(int(f.Fd()), sub); err == nil {
				f.Close()
				f, depth = next, depth+1
				continue
			}
		}
		if err == nil && depth > 0 {
			var up *os.File
			if up, err = openDir(int(f.Fd()), ".."); err == nil {
				f.Close()
				f, depth = up, depth-1
				continue // its child, empty now, goes in clearDir
			}
		}
		f.Close()
		if err != nil {
			return fmt.Errorf("remove %s: %w", name, err)
		}
		if err := unix.Unlinkat(dir, name, unix.AT_REMOVEDIR); err != nil && !errors.Is(err, unix.ENOENT) {
			return fmt.Errorf("remove %s: %w", name, err)
		}
		return nil
	}
}

// removeEntry removes name from dir if it is a file or an empty directory
// (done); it leaves a directory that is not empty.
func removeEntry(dir int, name string) (done bool, err error) {
	err = unix.Unlinkat(dir, name, 0)
	if errors.Is(err, unix.EISDIR) {
		err = unix.Unlinkat(dir, name, unix.AT_REMOVEDIR)
		if errors.Is(err, unix.ENOTEMPTY) || errors.Is(err, unix.EEXIST) {
			return false, nil
		}
	}
	if err == nil || errors.Is(err, unix.ENOENT) {
		return true, nil
	}
	return false, fmt.Errorf("remove %s: %w", name, err)
}

// clearDir removes the files and empty directories of f but those keep
// names, reading f from where it is, 1024 names at a time, and returns the
// name of a directory of f not in keep that is not empty, or "" once f
// holds nothing else.
func clearDir(f *os.File, keep map[string]devEntry) (string, error) {
	removed := false
	for {
		names, err := f.Readdirnames(1024)
		if len(names) == 0 {
			if err != nil && err != io.EOF {
				return "", err
			}
			if !removed {
				return "", nil
			}
			// Entries removed while reading may make a read skip some:
			// read again from the start until a pass removes none.
			if _, err := f.Seek(0, io.SeekStart); err != nil {
				return "", err
			}
			removed = false
			continue
		}
		for _, n := range names {
			if _, ok := keep[n]; ok {
				continue
			}
			done, err := removeEntry(int(f.Fd()), n)
			if err != nil || !done {
				return n, err
			}
			removed = true
		}
	}
}

func openDir(dir int, name string) (*os.File, error) {
	fd, err := unix.Openat(dir, name, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0)
	if err != nil {
		return nil, fmt.Errorf("open %s: %w", name, err)
	}
	return os.NewFile(uintptr(fd), name), nil
}
