// Package statemerge merges what a replica left in its own state
// directory into one of its app's volumes, by a file policy: Append (each
// file's bytes appended to the same path) or Newest (a file replaces the
// volume's copy when it is newer). A merge is done in batches made durable
// one by one, with a journal for the append policy, so a merge cut short by
// a crash is finished by running it again: no byte is lost and none is
// merged twice. It reads and writes only the directories it is given.
package statemerge

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path"
	"path/filepath"
	"slices"
	"syscall"

	"golang.org/x/sys/unix"
)

// File policies, as the [state] merge key of shoal.toml names them.
const (
	Append = "append"
	Newest = "newest"
)

// Result says what merging one replica's state did.
type Result struct {
	Files int   // files written into the volume
	Bytes int64 // bytes written into the volume
	Kept  int   // files left out because the volume's copy is as new (newest)
	// Skipped are the entries that are not regular files (symlinks,
	// FIFOs, sockets, devices): never followed, never merged.
	Skipped []string
}

// mergeStep is called between the durable steps of a merge; tests make it
// fail to stop a merge there as a crash would.
var mergeStep = func(step, rel string) error { return nil }

// Files merges the regular files under src into the volume at dst by
// policy (Append or Newest), each to the same relative path. work
// is a directory of the replica's own on dst's file system that outlives a
// crash: it holds the journal and temporary files. Files are merged in
// batches; a batch's files are removed from src once their merge is
// durable, so src holds what is left to merge, and a merge cut short (a
// crash, an error, ctx) is finished by calling Files again with the
// same directories: no byte is lost and none is merged twice. Nothing is
// written outside dst: paths are resolved in dst with os.Root, so a symlink
// in the volume cannot lead a merge out of it, and entries of src that are
// not regular files are skipped.
func Files(ctx context.Context, policy, src, work, dst string) (Result, error) {
	var res Result
	if policy != Append && policy != Newest {
		return res, fmt.Errorf("merge policy %q is not a file policy", policy)
	}
	sroot, err := os.OpenRoot(src)
	if err != nil {
		return res, fmt.Errorf("state: %w", err)
	}
	defer sroot.Close()
	if err := os.MkdirAll(dst, 0o755); err != nil {
		return res, fmt.Errorf("volume: %w", err)
	}
	droot, err := os.OpenRoot(dst)
	if err != nil {
		return res, fmt.Errorf("volume: %w", err)
	}
	defer droot.Close()
	if err := os.MkdirAll(work, 0o700); err != nil {
		return res, err
	}
	if err := recoverAppend(sroot, droot, work); err != nil {
		return res, err
	}
	files, skipped, err := listState(src)
	if err != nil {
		return res, fmt.Errorf("state: %w", err)
	}
	res.Skipped = skipped
	for len(files) > 0 {
		if err := ctx.Err(); err != nil {
			return res, err
		}
		batch := files[:min(mergeBatch, len(files))]
		files = files[len(batch):]
		if policy == Append {
			err = appendBatch(sroot, droot, work, batch, &res)
		} else {
			err = newestBatch(sroot, droot, work, batch, &res)
		}
		if err != nil {
			return res, err
		}
	}
	return res, nil
}

// removeSources removes merged state files and syncs their directories,
// so that no removal is undone by a crash once the next batch begins.
func removeSources(sroot *os.Root, batch []string) error {
	dirs := map[string]bool{}
	for _, rel := range batch {
		if err := sroot.Remove(rel); err != nil && !errors.Is(err, fs.ErrNotExist) {
			return fmt.Errorf("%s: %w", rel, err)
		}
		dirs[path.Dir(rel)] = true
		if err := mergeStep("removed", rel); err != nil {
			return err
		}
	}
	for d := range dirs {
		if err := syncIn(sroot, d); err != nil {
			return fmt.Errorf("state: %w", err)
		}
	}
	return nil
}

// listState returns the regular files under dir (relative, in lexical
// order) and the other entries that are not directories.
func listState(dir string) (files, skipped []string, err error) {
	err = filepath.WalkDir(dir, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(dir, p)
		switch {
		case d.IsDir():
		case d.Type().IsRegular():
			files = append(files, filepath.ToSlash(rel))
		default:
			skipped = append(skipped, fmt.Sprintf("%s (%s)", filepath.ToSlash(rel), kindOf(d.Type())))
		}
		return nil
	})
	return files, skipped, err
}

func kindOf(m fs.FileMode) string {
	switch {
	case m.IsDir():
		return "directory"
	case m&fs.ModeSymlink != 0:
		return "symlink"
	case m&fs.ModeNamedPipe != 0:
		return "fifo"
	case m&fs.ModeSocket != 0:
		return "socket"
	case m&fs.ModeDevice != 0:
		return "device"
	}
	return "not a regular file"
}

// openRegular opens rel in root without following a symlink and without
// waiting on a FIFO, and refuses anything but a regular file. A replica
// still running beside the merge can swap a checked entry of the shared
// volume for a FIFO (opening it would hang the merge) or a device node
// (the host's, not the container's, once the host opens it).
func openRegular(root *os.Root, rel string, flag int) (*os.File, error) {
	f, err := root.OpenFile(rel, flag|syscall.O_NOFOLLOW|syscall.O_NONBLOCK, 0)
	if err != nil {
		return nil, err
	}
	fi, err := f.Stat()
	if err == nil && !fi.Mode().IsRegular() {
		err = fmt.Errorf("it is not a regular file (%s)", kindOf(fi.Mode()))
	}
	if err != nil {
		f.Close()
		return nil, err
	}
	return f, nil
}

// ensureParent makes the directories of rel in the volume, reporting
// whether it made any (their parents are synced).
func ensureParent(droot *os.Root, rel string) (bool, error) {
	dir := path.Dir(rel)
	if dir == "." {
		return false, nil
	}
	if fi, err := droot.Stat(dir); err == nil {
		if !fi.IsDir() {
			return false, fmt.Errorf("in the volume %s is not a directory", dir)
		}
		return false, nil
	}
	if err := droot.MkdirAll(dir, 0o755); err != nil {
		return false, fmt.Errorf("in the volume: %w", err)
	}
	for d := dir; d != "."; d = path.Dir(d) {
		if err := syncIn(droot, path.Dir(d)); err != nil {
			return true, err
		}
	}
	return true, nil
}

// syncAll makes files durable: writeback of all of them is started first,
// so that their fsyncs share the file system's journal commits instead of
// waiting for one each.
func syncAll(files []*os.File) error {
	for _, f := range files {
		unix.SyncFileRange(int(f.Fd()), 0, 0, unix.SYNC_FILE_RANGE_WRITE)
	}
	for _, f := range files {
		if err := f.Sync(); err != nil {
			return fmt.Errorf("%s: %w", f.Name(), err)
		}
	}
	return nil
}

func syncIn(root *os.Root, dir string) error {
	d, err := root.Open(dir)
	if err != nil {
		return err
	}
	defer d.Close()
	return d.Sync()
}

func SyncDir(dir string) error {
	d, err := os.Open(dir)
	if err != nil {
		return err
	}
	defer d.Close()
	return d.Sync()
}

// chownLike gives a file written into the volume the owner of the state
// file it comes from, so the app's user can use it. Best effort: the
// merge's content matters more than its owner.
func chownLike(f *os.File, fi fs.FileInfo) {
	if st, ok := fi.Sys().(*syscall.Stat_t); ok {
		f.Chown(int(st.Uid), int(st.Gid))
	}
}

// SortedSkipped is res.Skipped for an event's reason, at most n shown.
func SortedSkipped(s []string, n int) string {
	s = slices.Clone(s)
	slices.Sort(s)
	if len(s) > n {
		return fmt.Sprint(s[:n], " and ", len(s)-n, " more")
	}
	return fmt.Sprint(s)
}
