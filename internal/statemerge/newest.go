package statemerge

import (
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path"
	"path/filepath"
	"time"

	"golang.org/x/sys/unix"
)

// newestBatch puts each state file of batch in the volume where it is
// newer than the volume's copy: copies in the work directory are written
// and synced, then renamed over their targets, whose directories are
// synced before the state files are removed. Run again after a crash, a
// copy already in place is as new as its state file and left.
func newestBatch(sroot, droot *os.Root, work string, batch []string, res *Result) error {
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
	in, err := openRegular(sroot, rel, os.O_RDONLY)
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
