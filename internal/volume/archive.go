package volume

import (
	"archive/tar"
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path"
	"path/filepath"
	"strings"
	"syscall"

	"golang.org/x/sys/unix"

	"github.com/shoal-run/shoal/internal/errdefs"
	"github.com/shoal-run/shoal/internal/units"
	"github.com/shoal-run/shoal/internal/userns"
)

// writeTar writes r, a name in root, and all below it as a tar: entries
// are named from r's base name, or from "." for the root. Nothing is
// followed out of root; what is neither a directory, a regular file nor a
// symbolic link is left out. Owners are the container's ids.
func writeTar(ctx context.Context, root *os.Root, r string, w io.Writer) error {
	tw := tar.NewWriter(w)
	base := path.Dir(r)
	err := fs.WalkDir(root.FS(), r, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if err := ctx.Err(); err != nil {
			return err
		}
		fi, err := root.Lstat(p)
		if err != nil {
			return err
		}
		name := p
		if base != "." {
			name = strings.TrimPrefix(p, base+"/")
		}
		var link string
		switch {
		case fi.Mode().IsRegular(), fi.IsDir():
		case fi.Mode()&fs.ModeSymlink != 0:
			if link, err = root.Readlink(p); err != nil {
				return err
			}
		default:
			return nil
		}
		h, err := tar.FileInfoHeader(fi, link)
		if err != nil {
			return err
		}
		uid, gid := statOf(fi)
		h.Name, h.Uid, h.Gid, h.Uname, h.Gname = name, int(userns.Unshift(uid)), int(userns.Unshift(gid)), "", ""
		if fi.IsDir() && !strings.HasSuffix(h.Name, "/") {
			h.Name += "/"
		}
		if err := tw.WriteHeader(h); err != nil {
			return err
		}
		if !fi.Mode().IsRegular() {
			return nil
		}
		f, err := root.OpenFile(p, os.O_RDONLY|unix.O_NOFOLLOW|unix.O_NONBLOCK, 0)
		if err != nil {
			return err
		}
		defer f.Close()
		if st, err := f.Stat(); err != nil || !st.Mode().IsRegular() {
			return fmt.Errorf("%s changed while it was read", p)
		}
		_, err = io.CopyN(tw, f, h.Size)
		return err
	})
	if err != nil {
		return err
	}
	return tw.Close()
}

// readTar unpacks the tar rd into dir, a new folder, with owners shifted
// into the range starting at host (0: none). Entries must stay under dir
// and be directories, regular files, symbolic links or hard links to an
// earlier entry; anything else is refused, naming it. Files of more than
// limit bytes in all (0: DefaultMaxBytes) are refused too, once the one
// that passes it is reached.
func readTar(ctx context.Context, rd io.Reader, dir string, host uint32, limit int64) error {
	if limit <= 0 {
		limit = DefaultMaxBytes
	}
	left := limit
	if err := os.Mkdir(dir, 0o700); err != nil {
		return err
	}
	root, err := os.OpenRoot(dir)
	if err != nil {
		return err
	}
	defer root.Close()
	tr := tar.NewReader(rd)
	type dirMeta struct {
		name string
		h    *tar.Header
	}
	var dirs []dirMeta
	id := func(n int) int {
		if n < 0 || n >= userns.Size {
			n = 65534
		}
		return int(host) + n
	}
	for {
		if err := ctx.Err(); err != nil {
			return err
		}
		h, err := tr.Next()
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			return fmt.Errorf("archive: %w", err)
		}
		name := path.Clean(strings.TrimPrefix(h.Name, "/"))
		if strings.ContainsRune(h.Name, 0) || !filepath.IsLocal(name) && name != "." {
			return fmt.Errorf("archive entry %q: leaves the folder it is unpacked into", h.Name)
		}
		if name != "." {
			if err := root.MkdirAll(path.Dir(name), 0o755); err != nil {
				return fmt.Errorf("archive entry %q: %w", h.Name, err)
			}
		}
		mode := os.FileMode(h.Mode & 0o777)
		switch h.Typeflag {
		case tar.TypeDir:
			if name != "." {
				if err := root.Mkdir(name, 0o700); err != nil && !errors.Is(err, fs.ErrExist) {
					return fmt.Errorf("archive entry %q: %w", h.Name, err)
				}
			}
			dirs = append(dirs, dirMeta{name, h})
			continue
		case tar.TypeReg:
			if left -= h.Size; left < 0 {
				return fmt.Errorf("archive entry %q: its files hold more than %s, the limit (--max-size, or %s): %w",
					h.Name, units.FormatBytes(limit), units.FormatBytes(DefaultMaxBytes), errdefs.ErrInvalid)
			}
			f, err := root.OpenFile(name, os.O_WRONLY|os.O_CREATE|os.O_TRUNC|unix.O_NOFOLLOW, 0o600)
			if err != nil {
				return fmt.Errorf("archive entry %q: %w", h.Name, err)
			}
			_, err = io.Copy(f, tr)
			if cerr := f.Close(); err == nil {
				err = cerr
			}
			if err != nil {
				return fmt.Errorf("archive entry %q: %w", h.Name, err)
			}
		case tar.TypeSymlink:
			root.Remove(name)
			if err := root.Symlink(h.Linkname, name); err != nil {
				return fmt.Errorf("archive entry %q: %w", h.Name, err)
			}
		case tar.TypeLink:
			target := path.Clean(strings.TrimPrefix(h.Linkname, "/"))
			if !filepath.IsLocal(target) {
				return fmt.Errorf("archive entry %q: a link to %q, out of the archive", h.Name, h.Linkname)
			}
			root.Remove(name)
			if err := root.Link(target, name); err != nil {
				return fmt.Errorf("archive entry %q: %w", h.Name, err)
			}
			continue
		default:
			return fmt.Errorf("archive entry %q: %s; only directories, files and links go into a volume", h.Name, kind(h.Typeflag))
		}
		if err := root.Lchown(name, id(h.Uid), id(h.Gid)); err != nil {
			return fmt.Errorf("archive entry %q: %w", h.Name, err)
		}
		if h.Typeflag == tar.TypeReg {
			if err := root.Chmod(name, mode|setBits(h.Mode)); err != nil {
				return fmt.Errorf("archive entry %q: %w", h.Name, err)
			}
			root.Chtimes(name, h.ModTime, h.ModTime)
		}
	}
	// Directories last, deepest first: their files are in.
	for i := len(dirs) - 1; i >= 0; i-- {
		d := dirs[i]
		if err := root.Lchown(d.name, id(d.h.Uid), id(d.h.Gid)); err != nil {
			return fmt.Errorf("archive entry %q: %w", d.h.Name, err)
		}
		if err := root.Chmod(d.name, os.FileMode(d.h.Mode&0o777)|setBits(d.h.Mode)); err != nil {
			return fmt.Errorf("archive entry %q: %w", d.h.Name, err)
		}
		root.Chtimes(d.name, d.h.ModTime, d.h.ModTime)
	}
	return nil
}

// setBits is the sticky and set-id bits of a tar mode.
func setBits(m int64) os.FileMode {
	var f os.FileMode
	if m&0o1000 != 0 {
		f |= os.ModeSticky
	}
	if m&0o2000 != 0 {
		f |= os.ModeSetgid
	}
	if m&0o4000 != 0 {
		f |= os.ModeSetuid
	}
	return f
}

func kind(t byte) string {
	switch t {
	case tar.TypeChar:
		return "a character device"
	case tar.TypeBlock:
		return "a block device"
	case tar.TypeFifo:
		return "a FIFO"
	}
	return fmt.Sprintf("an entry of type %q", t)
}

// mergeInto moves what is in stage (a folder of the daemon's) into
// directory r of root: a directory into one that is there merges with it
// (and gives it its owner, mode and time), anything else takes the place
// of what has its name.
func mergeInto(stage string, root *os.Root, r string) error {
	ents, err := os.ReadDir(stage)
	if err != nil {
		return err
	}
	dst, err := root.OpenFile(r, os.O_RDONLY|unix.O_DIRECTORY|unix.O_NOFOLLOW, 0)
	if err != nil {
		return fmt.Errorf("%s: %w", r, err)
	}
	defer dst.Close()
	for _, e := range ents {
		src := filepath.Join(stage, e.Name())
		to := path.Join(r, e.Name())
		have, err := root.Lstat(to)
		switch {
		case err == nil && have.IsDir() && e.IsDir():
			if err := mergeInto(src, root, to); err != nil {
				return err
			}
			if err := copyMeta(src, root, to); err != nil {
				return err
			}
			continue
		case err == nil && have.IsDir():
			if err := root.RemoveAll(to); err != nil {
				return err
			}
		}
		if err := unix.Renameat(unix.AT_FDCWD, src, int(dst.Fd()), e.Name()); err != nil {
			return fmt.Errorf("%s: %w", to, err)
		}
	}
	return nil
}

// copyMeta gives directory to of root the owner, mode and time of src.
func copyMeta(src string, root *os.Root, to string) error {
	fi, err := os.Lstat(src)
	if err != nil {
		return err
	}
	st := fi.Sys().(*syscall.Stat_t)
	if err := root.Lchown(to, int(st.Uid), int(st.Gid)); err != nil {
		return err
	}
	if err := root.Chmod(to, fi.Mode()&(fs.ModePerm|fs.ModeSticky|fs.ModeSetgid|fs.ModeSetuid)); err != nil {
		return err
	}
	return root.Chtimes(to, fi.ModTime(), fi.ModTime())
}
