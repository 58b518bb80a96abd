package statemerge

import (
	"archive/tar"
	"errors"
	"fmt"
	"io"
	"os"
	"path"
	"path/filepath"
	"strings"
	"syscall"
)

// WriteTar writes the regular files of the state at dir (written by
// untrusted code) to w as a tar, each opened as a merge opens it: without
// following a symlink, without waiting on a FIFO, refused unless regular.
// Symlinks, FIFOs, sockets and devices are left out and listed in skipped.
// More than max bytes in all is an error.
func WriteTar(dir string, w io.Writer, max int64) (skipped []string, err error) {
	root, err := os.OpenRoot(dir)
	if err != nil {
		return nil, fmt.Errorf("state %s: %w", dir, err)
	}
	defer root.Close()
	files, skipped, err := listState(dir)
	if err != nil {
		return nil, fmt.Errorf("state %s: %w", dir, err)
	}
	tw := tar.NewWriter(w)
	var total int64
	for _, rel := range files {
		f, err := openRegular(root, rel, os.O_RDONLY)
		if err != nil {
			// Swapped for another kind of entry since the listing.
			skipped = append(skipped, fmt.Sprintf("%s (%v)", rel, err))
			continue
		}
		err = writeEntry(tw, f, rel, max-total)
		if err == nil {
			fi, _ := f.Stat()
			total += fi.Size()
		}
		f.Close()
		if err != nil {
			return skipped, fmt.Errorf("state file %s: %w", rel, err)
		}
	}
	return skipped, tw.Close()
}

// writeEntry writes the open regular file f as rel, at most left bytes.
func writeEntry(tw *tar.Writer, f *os.File, rel string, left int64) error {
	fi, err := f.Stat()
	if err != nil {
		return err
	}
	if fi.Size() > left {
		return errors.New("the state is larger than the bound")
	}
	h := &tar.Header{Typeflag: tar.TypeReg, Name: rel, Mode: int64(fi.Mode().Perm()),
		Size: fi.Size(), ModTime: fi.ModTime(), Format: tar.FormatPAX}
	if st, ok := fi.Sys().(*syscall.Stat_t); ok {
		h.Uid, h.Gid = int(st.Uid), int(st.Gid)
	}
	if err := tw.WriteHeader(h); err != nil {
		return err
	}
	// The file may grow or shrink while read: exactly its header's size.
	n, err := io.Copy(tw, io.LimitReader(f, fi.Size()))
	if err == nil && n < fi.Size() {
		_, err = io.CopyN(tw, zeros{}, fi.Size()-n)
	}
	return err
}

type zeros struct{}

func (zeros) Read(b []byte) (int, error) { clear(b); return len(b), nil }

// ReadTar writes the regular files of the tar r (as WriteTar writes it)
// under dst, keeping their mode, owner and modification time, and syncs
// them. Any other kind of entry, a name leaving dst, or more than max
// bytes in all is an error.
func ReadTar(r io.Reader, dst string, max int64) (files int, err error) {
	root, err := os.OpenRoot(dst)
	if err != nil {
		return 0, fmt.Errorf("state %s: %w", dst, err)
	}
	defer root.Close()
	tr := tar.NewReader(r)
	var total int64
	for {
		h, err := tr.Next()
		if err == io.EOF {
			return files, nil
		}
		if err != nil {
			return files, fmt.Errorf("state tar: %w", err)
		}
		name := path.Clean(h.Name)
		if h.Typeflag != tar.TypeReg || !filepath.IsLocal(name) || strings.Contains(name, "\\") {
			return files, fmt.Errorf("state tar: entry %q is not a regular file under the area", h.Name)
		}
		if total += h.Size; h.Size < 0 || total > max {
			return files, fmt.Errorf("state tar: entry %q: the state is larger than the bound", h.Name)
		}
		if err := readEntry(root, tr, h, name); err != nil {
			return files, fmt.Errorf("state tar: entry %q: %w", h.Name, err)
		}
		files++
	}
}

func readEntry(root *os.Root, tr *tar.Reader, h *tar.Header, name string) error {
	if dir := path.Dir(name); dir != "." {
		if err := root.MkdirAll(dir, 0o755); err != nil {
			return err
		}
	}
	f, err := openRegular(root, name, os.O_WRONLY|os.O_CREATE|os.O_EXCL)
	if err != nil {
		return err
	}
	_, err = io.Copy(f, tr)
	if err == nil {
		err = f.Chmod(os.FileMode(h.Mode).Perm())
	}
	if err == nil {
		err = f.Chown(h.Uid, h.Gid)
	}
	if err == nil {
		err = f.Sync()
	}
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err == nil {
		err = root.Chtimes(name, h.ModTime, h.ModTime)
	}
	return err
}
