package statemerge

import (
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"sort"
	"syscall"
)

// WriteSynced writes a small file and syncs it.
func WriteSynced(p string, b []byte) error {
	f, err := os.OpenFile(p, os.O_WRONLY|os.O_CREATE|os.O_TRUNC, 0o600)
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
	return err
}

// Count counts the regular files under dir and their bytes.
func Count(dir string) (files int, bytes int64, skipped []string) {
	filepath.WalkDir(dir, func(p string, d fs.DirEntry, err error) error {
		switch {
		case err != nil, d.IsDir():
		case d.Type().IsRegular():
			if fi, err := d.Info(); err == nil {
				files++
				bytes += fi.Size()
			}
		default:
			rel, _ := filepath.Rel(dir, p)
			skipped = append(skipped, fmt.Sprintf("%s (%s)", rel, kindOf(d.Type())))
		}
		return nil
	})
	return files, bytes, skipped
}

// HasJournal reports whether the state area holds an append journal: a
// batch that was cut short (a crash or an error) and is not rolled back.
func HasJournal(area string) bool {
	_, err := os.Lstat(filepath.Join(area, "work", journalName))
	return err == nil
}

// Retired lists the state areas under gone in the order they were
// retired (the rename that moved each set its change time), so that
// appended logs follow one another as their replicas did. An area with an
// append journal comes first whatever its time: its recovery cuts targets
// back to the sizes the journal recorded, which is right only while no
// other merge has appended to them since.
func Retired(gone string) []os.DirEntry {
	ents, _ := os.ReadDir(gone)
	at := make(map[string]int64, len(ents))
	for _, e := range ents {
		if fi, err := e.Info(); err == nil {
			if st, ok := fi.Sys().(*syscall.Stat_t); ok {
				at[e.Name()] = st.Ctim.Nano()
			}
		}
	}
	journal := make(map[string]bool, len(ents))
	for _, e := range ents {
		journal[e.Name()] = HasJournal(filepath.Join(gone, e.Name()))
	}
	sort.SliceStable(ents, func(i, j int) bool {
		if ji, jj := journal[ents[i].Name()], journal[ents[j].Name()]; ji != jj {
			return ji
		}
		a, b := at[ents[i].Name()], at[ents[j].Name()]
		return a < b || (a == b && ents[i].Name() < ents[j].Name())
	})
	return ents
}
