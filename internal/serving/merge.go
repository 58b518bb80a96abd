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
// size every target of the batch under way had before the batch.
const journalName = "append.json"

type appendJournal struct {
	Offsets map[string]int64 `json:"offsets"` // relative path → size before
}

// mergeBatch is how many files are merged between two journal writes: the
// per-file cost is then about one fsync (the target's).
const mergeBatch = 256

// mergeStep is called between the durable steps of a merge; tests make it
// fail to stop a merge there as a crash would.
var mergeStep = func(step, rel string) error { return nil }

// mergeFiles merges the regular files under src into the volume at dst by
// policy (MergeAppend or MergeNewest), each to the same relative path. work
// is a directory of the replica's own on dst's file system that outlives a
// crash: it holds the journal and temporary files. Files are merged in
// batches; a batch's files are removed from src once their merge is
// durable, so src holds what is left to merge, and a merge cut short (a
// crash, an error, ctx) is finished by calling mergeFiles again with the
// same directories: no byte is lost and none is merged twice. Nothing is
// written outside dst: paths are resolved in dst with os.Root, so a symlink
// in the volume cannot lead a merge out of it, and entries of src that are
// not regular files are skipped.
func mergeFiles(ctx context.Context, policy, src, work, dst string) (mergeResult, error) {
	var res mergeResult
	if policy != MergeAppend && policy != MergeNewest {
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
		if policy == MergeAppend {
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

// appendBatch appends each state file of batch to the same path in the
// volume. The journal records every target's size first; the targets (and
// directories that got new entries) are synced before the state files are
// removed, and the journal goes last.
func appendBatch(sroot, droot *os.Root, work string, batch []string, res *mergeResult) error {
	j := appendJournal{Offsets: make(map[string]int64, len(batch))}
	for _, rel := range batch {
		fi, err := droot.Lstat(rel)
		switch {
		case errors.Is(err, fs.ErrNotExist):
			j.Offsets[rel] = 0
		case err != nil:
			return fmt.Errorf("%s: in the volume: %w", rel, err)
		case !fi.Mode().IsRegular():
			return fmt.Errorf("%s: in the volume it is not a regular file (%s)", rel, kindOf(fi.Mode()))
		default:
			j.Offsets[rel] = fi.Size()
		}
	}
	if err := writeJournal(work, j); err != nil {
		return err
	}
	if err := mergeStep("journal", batch[0]); err != nil {
		return err
	}
	dirs := map[string]bool{}
	outs := make([]*os.File, 0, len(batch))
	defer func() {
		for _, f := range outs {
			f.Close()
		}
	}()
	for _, rel := range batch {
		out, n, created, err := appendFile(sroot, droot, rel)
		if err != nil {
			return fmt.Errorf("%s: %w", rel, err)
		}
		outs = append(outs, out)
		if created {
			dirs[path.Dir(rel)] = true
		}
		res.Files++
		res.Bytes += n
		if err := mergeStep("written", rel); err != nil {
			return err
		}
	}
	if err := syncAll(outs); err != nil {
		return fmt.Errorf("volume: %w", err)
	}
	for d := range dirs {
		if err := syncIn(droot, d); err != nil {
			return fmt.Errorf("volume: %w", err)
		}
	}
	if err := removeSources(sroot, batch); err != nil {
		return err
	}
	if err := os.Remove(filepath.Join(work, journalName)); err != nil {
		return err
	}
	return syncDir(work)
}

// newestBatch puts each state file of batch in the volume where it is
// newer than the volume's copy: copies in the work directory are written
// and synced, then renamed over their targets, whose directories are
// synced before the state files are removed. Run again after a crash, a
// copy already in place is as new as its state file and left.
func newestBatch(sroot, droot *os.Root, work string, batch []string, res *mergeResult) error {
	copies := map[string]*newestCopy{}
	var files []*os.File
	defer func() {
		for _, f := range files {
			f.Close()
		}
	}()
	for i, rel := range batch {
		c, err := copyIfNewer(sroot, droot, work, rel, fmt.Sprintf("newest-%d.tmp", i))
		if err != nil {
			return fmt.Errorf("%s: %w", rel, err)
		}
		if c != nil {
			copies[rel] = c
			files = append(files, c.f)
		}
	}
	if err := syncAll(files); err != nil {
		return err
	}
	wd, err := os.Open(work)
	if err != nil {
		return err
	}
	defer wd.Close()
	dirs := map[string]bool{}
	for _, rel := range batch {
		c := copies[rel]
		if c == nil {
			res.Kept++
		} else {
			if err := renameInto(wd, c.tmp, droot, rel); err != nil {
				return fmt.Errorf("%s: %w", rel, err)
			}
			dirs[path.Dir(rel)] = true
			res.Files++
			res.Bytes += c.n
		}
		if err := mergeStep("written", rel); err != nil {
			return err
		}
	}
	for d := range dirs {
		if err := syncIn(droot, d); err != nil {
			return fmt.Errorf("volume: %w", err)
		}
	}
	return removeSources(sroot, batch)
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

// recoverAppend finishes the append batch that a crash cut short: each
// target of the journal whose state file is still there (its merge not
// done) is cut back to the size it had before the batch, so the file is
// appended again, once; a state file that is gone was merged durably.
func recoverAppend(sroot, droot *os.Root, work string) error {
	b, err := os.ReadFile(filepath.Join(work, journalName))
	if errors.Is(err, fs.ErrNotExist) {
		return nil
	}
	if err != nil {
		return err
	}
	var j appendJournal
	if err := json.Unmarshal(b, &j); err != nil {
		// Written by rename, so never torn; unreadable means not ours.
		return fmt.Errorf("merge journal %s is unreadable: %v", filepath.Join(work, journalName), err)
	}
	for rel, off := range j.Offsets {
		if _, err := sroot.Lstat(rel); errors.Is(err, fs.ErrNotExist) {
			continue
		} else if err != nil {
			return err
		}
		fi, err := droot.Lstat(rel)
		if errors.Is(err, fs.ErrNotExist) || (err == nil && (!fi.Mode().IsRegular() || fi.Size() <= off)) {
			continue
		}
		if err != nil {
			return fmt.Errorf("%s: %w", rel, err)
		}
		f, err := droot.OpenFile(rel, os.O_WRONLY|syscall.O_NOFOLLOW, 0)
		if err != nil {
			return fmt.Errorf("%s: %w", rel, err)
		}
		err = f.Truncate(off)
		if err == nil {
			err = f.Sync()
		}
		f.Close()
		if err != nil {
			return fmt.Errorf("%s: cut back an interrupted append: %w", rel, err)
		}
	}
	if err := os.Remove(filepath.Join(work, journalName)); err != nil {
		return err
	}
	return syncDir(work)
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

// appendFile appends the state file rel to the same path in the volume,
// at its end, creating it (and its directories) with the state file's mode
// and owner. It returns the target, open, for the caller to sync and
// close, and whether it created it.
func appendFile(sroot, droot *os.Root, rel string) (*os.File, int64, bool, error) {
	in, err := sroot.OpenFile(rel, os.O_RDONLY|syscall.O_NOFOLLOW, 0)
	if err != nil {
		return nil, 0, false, err
	}
	defer in.Close()
	fi, err := in.Stat()
	if err != nil {
		return nil, 0, false, err
	}
	if _, err := ensureParent(droot, rel); err != nil {
		return nil, 0, false, err
	}
	out, err := droot.OpenFile(rel, os.O_WRONLY|os.O_CREATE|os.O_EXCL, fi.Mode().Perm())
	created := err == nil
	if errors.Is(err, fs.ErrExist) {
		out, err = droot.OpenFile(rel, os.O_WRONLY|syscall.O_NOFOLLOW, 0)
	}
	if err != nil {
		return nil, 0, false, fmt.Errorf("in the volume: %w", err)
	}
	ofi, err := out.Stat()
	if err == nil && !ofi.Mode().IsRegular() {
		err = fmt.Errorf("in the volume it is not a regular file (%s)", kindOf(ofi.Mode()))
	}
	var n int64
	if err == nil {
		n, err = io.Copy(io.NewOffsetWriter(out, ofi.Size()), in)
	}
	if err != nil {
		out.Close()
		return nil, n, false, err
	}
	if created {
		chownLike(out, fi)
		out.Chmod(fi.Mode().Perm()) // the umask left out
	}
	return out, n, created, nil
}

// newestCopy is a state file's copy in the work directory, written and
// open, waiting to be synced and renamed over its target.
type newestCopy struct {
	tmp string
	f   *os.File
	n   int64
}

// copyIfNewer copies the state file rel to tmp in the work directory, with
// its mode, owner and modification time, when the volume has no copy or an
// older one (by modification time); nil when the volume's is as new.
func copyIfNewer(sroot, droot *os.Root, work, rel, tmp string) (*newestCopy, error) {
	in, err := sroot.OpenFile(rel, os.O_RDONLY|syscall.O_NOFOLLOW, 0)
	if err != nil {
		return nil, err
	}
	defer in.Close()
	fi, err := in.Stat()
	if err != nil {
		return nil, err
	}
	if _, err := ensureParent(droot, rel); err != nil {
		return nil, err
	}
	if tfi, err := droot.Lstat(rel); err == nil {
		if !tfi.Mode().IsRegular() {
			return nil, fmt.Errorf("in the volume it is not a regular file (%s)", kindOf(tfi.Mode()))
		}
		if !fi.ModTime().After(tfi.ModTime()) {
			return nil, nil
		}
	} else if !errors.Is(err, fs.ErrNotExist) {
		return nil, fmt.Errorf("in the volume: %w", err)
	}
	p := filepath.Join(work, tmp)
	out, err := os.OpenFile(p, os.O_WRONLY|os.O_CREATE|os.O_TRUNC, fi.Mode().Perm())
	if err != nil {
		return nil, err
	}
	n, err := io.Copy(out, in)
	if err == nil {
		chownLike(out, fi)
		err = out.Chmod(fi.Mode().Perm())
	}
	if err == nil {
		err = os.Chtimes(p, time.Time{}, fi.ModTime())
	}
	if err != nil {
		out.Close()
		return nil, err
	}
	return &newestCopy{tmp: tmp, f: out, n: n}, nil
}

// renameInto renames tmp of the work directory over rel in the volume. The
// parent is opened through the volume's root; renameat does not follow a
// symlink in the last component, it replaces it.
func renameInto(wd *os.File, tmp string, droot *os.Root, rel string) error {
	pd, err := droot.Open(path.Dir(rel))
	if err != nil {
		return fmt.Errorf("in the volume: %w", err)
	}
	defer pd.Close()
	if err := unix.Renameat(int(wd.Fd()), tmp, int(pd.Fd()), path.Base(rel)); err != nil {
		return fmt.Errorf("in the volume: rename: %w", err)
	}
	return nil
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
