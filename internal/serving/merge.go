package serving

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path"
	"path/filepath"
	"slices"
	"syscall"
	"time"

	"golang.org/x/sys/unix"
)

// mergeResult says what merging one replica's state did.
type mergeResult struct {
	Files int   // files written into the volume
	Bytes int64 // bytes written into the volume
	Kept  int   // files left out because the volume's copy is as new (newest)
	// Skipped are the entries that are not regular files (symlinks,
	// FIFOs, sockets, devices): never followed, never merged.
	Skipped []string
}

// journalName is the append policy's journal in the work directory: the
// file being appended and the size its target had before.
const journalName = "append.json"

// mergeStep is called between the durable steps of a merge; tests make it
// fail to stop a merge there as a crash would.
var mergeStep = func(step, rel string) error { return nil }

type appendJournal struct {
	File   string `json:"file"`
	Offset int64  `json:"offset"`
}

// mergeFiles merges the regular files under src into the volume at dst by
// policy (MergeAppend or MergeNewest), each to the same relative path. work
// is a directory of the replica's own on dst's file system that outlives a
// crash: it holds the journal and temporary files. A file is removed from
// src once its merge is durable, so src holds what is left to merge, and a
// merge cut short (a crash, an error, ctx) is finished by calling mergeFiles
// again with the same directories: no byte is lost and none is merged
// twice. Nothing is written outside dst: paths are resolved in dst with
// os.Root, so a symlink in the volume cannot lead a merge out of it, and
// entries of src that are not regular files are skipped.
func mergeFiles(ctx context.Context, policy, src, work, dst string) (mergeResult, error) {
	var res mergeResult
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
	if policy == MergeAppend {
		if err := recoverAppend(sroot, droot, work); err != nil {
			return res, err
		}
	}
	files, skipped, err := listState(src)
	if err != nil {
		return res, fmt.Errorf("state: %w", err)
	}
	res.Skipped = skipped
	for _, rel := range files {
		if err := ctx.Err(); err != nil {
			return res, err
		}
		var n int64
		var merged bool
		switch policy {
		case MergeAppend:
			n, err = appendFile(sroot, droot, work, rel)
			merged = true
		case MergeNewest:
			n, merged, err = newestFile(sroot, droot, work, rel)
		default:
			return res, fmt.Errorf("merge policy %q is not a file policy", policy)
		}
		if err != nil {
			return res, fmt.Errorf("%s: %w", rel, err)
		}
		if merged {
			res.Files++
			res.Bytes += n
		} else {
			res.Kept++
		}
		if err := mergeStep("written", rel); err != nil {
			return res, err
		}
		if err := removeSynced(sroot, rel); err != nil {
			return res, fmt.Errorf("%s: %w", rel, err)
		}
		if err := mergeStep("removed", rel); err != nil {
			return res, err
		}
	}
	if err := os.Remove(filepath.Join(work, journalName)); err != nil && !errors.Is(err, fs.ErrNotExist) {
		return res, err
	}
	return res, nil
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

// recoverAppend finishes the append that a crash cut short: if the journal
// names a file that is still in the state (its merge was not done), the
// target is cut back to the size it had before, so the whole file is
// appended again once; if the file is gone, its merge was done.
func recoverAppend(sroot, droot *os.Root, work string) error {
	b, err := os.ReadFile(filepath.Join(work, journalName))
	if errors.Is(err, fs.ErrNotExist) {
		return nil
	}
	if err != nil {
		return err
	}
	var j appendJournal
	if err := json.Unmarshal(b, &j); err != nil || j.File == "" || j.Offset < 0 {
		// Written by rename, so never torn; unreadable means not ours.
		return fmt.Errorf("merge journal %s is unreadable: %v", filepath.Join(work, journalName), err)
	}
	if _, err := sroot.Lstat(j.File); err == nil {
		f, err := droot.OpenFile(j.File, os.O_WRONLY, 0)
		switch {
		case errors.Is(err, fs.ErrNotExist):
		case err != nil:
			return fmt.Errorf("%s: %w", j.File, err)
		default:
			fi, err := f.Stat()
			if err == nil && fi.Mode().IsRegular() && fi.Size() > j.Offset {
				err = f.Truncate(j.Offset)
				if err == nil {
					err = f.Sync()
				}
			}
			f.Close()
			if err != nil {
				return fmt.Errorf("%s: cut back an interrupted append: %w", j.File, err)
			}
		}
	} else if !errors.Is(err, fs.ErrNotExist) {
		return err
	}
	if err := os.Remove(filepath.Join(work, journalName)); err != nil {
		return err
	}
	return syncDir(work)
}

// appendFile appends the state file rel to the same path in the volume,
// creating it (and its directories) with the state file's mode and owner.
// The journal records the target's size first, and the target is synced
// before the caller removes the state file.
func appendFile(sroot, droot *os.Root, work, rel string) (int64, error) {
	in, err := sroot.OpenFile(rel, os.O_RDONLY|syscall.O_NOFOLLOW, 0)
	if err != nil {
		return 0, err
	}
	defer in.Close()
	fi, err := in.Stat()
	if err != nil {
		return 0, err
	}
	created, err := ensureParent(droot, rel)
	if err != nil {
		return 0, err
	}
	_, statErr := droot.Lstat(rel)
	out, err := droot.OpenFile(rel, os.O_WRONLY|os.O_CREATE, fi.Mode().Perm())
	if err != nil {
		return 0, fmt.Errorf("in the volume: %w", err)
	}
	defer out.Close()
	ofi, err := out.Stat()
	if err != nil {
		return 0, err
	}
	if !ofi.Mode().IsRegular() {
		return 0, fmt.Errorf("in the volume it is not a regular file (%s)", ofi.Mode().Type())
	}
	offset := ofi.Size()
	if err := writeJournal(work, appendJournal{File: rel, Offset: offset}); err != nil {
		return 0, err
	}
	if err := mergeStep("journal", rel); err != nil {
		return 0, err
	}
	n, err := io.Copy(io.NewOffsetWriter(out, offset), in)
	if err != nil {
		return n, err
	}
	if errors.Is(statErr, fs.ErrNotExist) {
		created = true
		chownLike(out, fi)
		out.Chmod(fi.Mode().Perm()) // the umask left out
	}
	if err := out.Sync(); err != nil {
		return n, err
	}
	if created {
		return n, syncIn(droot, path.Dir(rel))
	}
	return n, nil
}

// newestFile puts the state file rel in the volume when the volume has no
// copy or an older one (by modification time): a copy in the work
// directory, with the same time, renamed over the target. It reports
// whether it did. Run again after a crash it finds the copy as new and
// leaves it.
func newestFile(sroot, droot *os.Root, work, rel string) (int64, bool, error) {
	in, err := sroot.OpenFile(rel, os.O_RDONLY|syscall.O_NOFOLLOW, 0)
	if err != nil {
		return 0, false, err
	}
	defer in.Close()
	fi, err := in.Stat()
	if err != nil {
		return 0, false, err
	}
	if _, err := ensureParent(droot, rel); err != nil {
		return 0, false, err
	}
	if tfi, err := droot.Lstat(rel); err == nil {
		if !tfi.Mode().IsRegular() {
			return 0, false, fmt.Errorf("in the volume it is not a regular file (%s)", tfi.Mode().Type())
		}
		if !fi.ModTime().After(tfi.ModTime()) {
			return 0, false, nil
		}
	} else if !errors.Is(err, fs.ErrNotExist) {
		return 0, false, fmt.Errorf("in the volume: %w", err)
	}
	const tmpName = "newest.tmp"
	tmp := filepath.Join(work, tmpName)
	out, err := os.OpenFile(tmp, os.O_WRONLY|os.O_CREATE|os.O_TRUNC, fi.Mode().Perm())
	if err != nil {
		return 0, false, err
	}
	n, err := io.Copy(out, in)
	if err == nil {
		chownLike(out, fi)
		err = out.Chmod(fi.Mode().Perm())
	}
	if err == nil {
		err = os.Chtimes(tmp, time.Time{}, fi.ModTime())
	}
	if err == nil {
		err = out.Sync()
	}
	if cerr := out.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		return 0, false, err
	}
	pd, err := droot.Open(path.Dir(rel))
	if err != nil {
		return 0, false, fmt.Errorf("in the volume: %w", err)
	}
	defer pd.Close()
	wd, err := os.Open(work)
	if err != nil {
		return 0, false, err
	}
	defer wd.Close()
	// The parent was opened through the volume's root; renameat does not
	// follow a symlink in the last component, it replaces it.
	if err := unix.Renameat(int(wd.Fd()), tmpName, int(pd.Fd()), path.Base(rel)); err != nil {
		return 0, false, fmt.Errorf("in the volume: rename: %w", err)
	}
	if err := pd.Sync(); err != nil {
		return 0, false, err
	}
	return n, true, nil
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

// writeJournal replaces the journal durably: a temporary file, synced,
// renamed over it, and the directory synced.
func writeJournal(work string, j appendJournal) error {
	b, _ := json.Marshal(j)
	tmp := filepath.Join(work, journalName+".tmp")
	f, err := os.OpenFile(tmp, os.O_WRONLY|os.O_CREATE|os.O_TRUNC, 0o600)
	if err != nil {
		return err
	}
	_, err = f.Write(b)
	if err == nil {
		err = f.Sync()
	}
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err == nil {
		err = os.Rename(tmp, filepath.Join(work, journalName))
	}
	if err != nil {
		return fmt.Errorf("merge journal: %w", err)
	}
	return syncDir(work)
}

// removeSynced removes a merged state file and syncs its directory, so the
// removal is durable before the next file's journal is written.
func removeSynced(root *os.Root, rel string) error {
	if err := root.Remove(rel); err != nil && !errors.Is(err, fs.ErrNotExist) {
		return err
	}
	return syncIn(root, path.Dir(rel))
}

func syncIn(root *os.Root, dir string) error {
	d, err := root.Open(dir)
	if err != nil {
		return err
	}
	defer d.Close()
	return d.Sync()
}

func syncDir(dir string) error {
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

// sortedSkipped is res.Skipped for an event's reason, at most n shown.
func sortedSkipped(s []string, n int) string {
	s = slices.Clone(s)
	slices.Sort(s)
	if len(s) > n {
		return fmt.Sprint(s[:n], " and ", len(s)-n, " more")
	}
	return fmt.Sprint(s)
}
