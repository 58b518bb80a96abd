package sandbox

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"

	"github.com/shoal-run/shoal/internal/jobs"
	"github.com/shoal-run/shoal/internal/runtime"
	"golang.org/x/sys/unix"
)

// makeWork mounts a size-capped tmpfs at work and writes the input files.
func (s *Sandbox) makeWork(work string, p *jobs.Plan, ns *runtime.UserNS) error {
	if err := s.mountWork(work, p.Work, ns); err != nil {
		return err
	}
	return s.writeFiles(work, p, ns)
}

// mountWork mounts a tmpfs of size bytes at work, a new directory, owned
// by the sandbox's user in ns.
func (s *Sandbox) mountWork(work string, size int64, ns *runtime.UserNS) error {
	uid, gid := s.hostOwner(ns)
	if err := os.Mkdir(work, 0o700); err != nil {
		return err
	}
	opts := fmt.Sprintf("size=%d,nr_inodes=%d,mode=0755,uid=%d,gid=%d", size, inodes(size), uid, gid)
	if err := unix.Mount("tmpfs", work, "tmpfs", unix.MS_NOSUID|unix.MS_NODEV, opts); err != nil {
		return fmt.Errorf("mount tmpfs at %s: %w", work, err)
	}
	return nil
}

// writeFiles writes the job's input files into the work tmpfs, through an
// os.Root (no link followed), before any step of the job has run in it.
func (s *Sandbox) writeFiles(work string, p *jobs.Plan, ns *runtime.UserNS) error {
	uid, gid := s.hostOwner(ns)
	if len(p.Req.Files) == 0 {
		return nil
	}
	root, err := os.OpenRoot(work)
	if err != nil {
		return err
	}
	defer root.Close()
	for name, content := range p.Req.Files {
		if dir := filepath.Dir(name); dir != "." {
			if err := root.MkdirAll(dir, 0o755); err != nil {
				return fmt.Errorf("files[%q]: %w", name, err)
			}
			if err := chownPath(root, dir, uid, gid); err != nil {
				return fmt.Errorf("files[%q]: %w", name, err)
			}
		}
		f, err := root.OpenFile(name, os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o644)
		if err != nil {
			return fmt.Errorf("files[%q]: %w", name, err)
		}
		_, err = f.Write(content)
		if err == nil {
			err = f.Chown(uid, gid)
		}
		if cerr := f.Close(); err == nil {
			err = cerr
		}
		if err != nil {
			return fmt.Errorf("files[%q]: %w", name, err)
		}
	}
	return nil
}

// inodes bounds the files of a tmpfs of size bytes: one per 4 KiB, at
// least 1024. Without a bound a flood of empty files grows the kernel's
// inode memory, not the file system's size, until the step's memory limit
// kills it.
func inodes(size int64) int64 { return max(size/4096, 1024) }

// chownPath gives every directory of dir (relative to root) to uid:gid.
func chownPath(root *os.Root, dir string, uid, gid int) error {
	for d := dir; d != "." && d != "/"; d = filepath.Dir(d) {
		if err := root.Lchown(d, uid, gid); err != nil {
			return err
		}
	}
	return nil
}

func (s *Sandbox) removeWork(work string) {
	if err := unix.Unmount(work, unix.MNT_DETACH); err != nil && !errors.Is(err, unix.EINVAL) && !errors.Is(err, unix.ENOENT) {
		s.log().Warn("unmount job work directory", "dir", work, "err", err)
	}
	if err := os.RemoveAll(work); err != nil {
		s.log().Warn("remove job work directory", "dir", work, "err", err)
	}
}
