package statemerge

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path"
	"path/filepath"
)

// journalName is the append policy's journal in the work directory: the
// size every target of the batch under way had before the batch.
const journalName = "append.json"

type appendJournal struct {
	Offsets map[string]int64 `json:"offsets"` // relative path → size before
}

// mergeBatch is how many files are merged between two journal writes: the
// per-file cost is then about one fsync (the target's).
const mergeBatch = 256

// appendBatch appends each state file of batch to the same path in the
// volume. The journal records every target's size first; the targets (and
// directories that got new entries) are synced before the state files are
// removed, and the journal goes last.
func appendBatch(sroot, droot *os.Root, work string, batch []string, res *Result) error {
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
	return SyncDir(work)
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
		return fmt.Errorf("merge journal %s is unreadable: %w", filepath.Join(work, journalName), err)
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
		f, err := openRegular(droot, rel, os.O_WRONLY)
		if err != nil {
			return fmt.Errorf("%s: in the volume: %w", rel, err)
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
	return SyncDir(work)
}

// appendFile appends the state file rel to the same path in the volume,
// at its end, creating it (and its directories) with the state file's mode
// and owner. It returns the target, open, for the caller to sync and
// close, and whether it created it.
func appendFile(sroot, droot *os.Root, rel string) (*os.File, int64, bool, error) {
	in, err := openRegular(sroot, rel, os.O_RDONLY)
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
		out, err = openRegular(droot, rel, os.O_WRONLY)
	}
	if err != nil {
		return nil, 0, false, fmt.Errorf("in the volume: %w", err)
	}
	ofi, err := out.Stat()
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

// writeJournal replaces the journal durably: a temporary file, synced,
// renamed over it, and the directory synced.
func writeJournal(work string, j appendJournal) error {
	b, _ := json.Marshal(j)
	tmp := filepath.Join(work, journalName+".tmp")
	err := WriteSynced(tmp, b)
	if err == nil {
		err = os.Rename(tmp, filepath.Join(work, journalName))
	}
	if err != nil {
		return fmt.Errorf("merge journal: %w", err)
	}
	return SyncDir(work)
}
