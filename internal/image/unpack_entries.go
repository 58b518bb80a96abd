package image

import (
	"archive/tar"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path"
	"strings"

	"golang.org/x/sys/unix"
)

// ensureDir makes dir (and its missing parents) a real directory inside the
// root. A symlink or non-directory on the way is refused: following it is how
// a layer writes outside its root. Each directory it creates counts as an
// entry, so one deep name cannot spend more inodes than the limit allows.
func (u *unpacker) ensureDir(entry, dir string) error {
	if u.okDirs[dir] {
		return nil
	}
	if err := u.ensureDir(entry, path.Dir(dir)); err != nil {
		return err
	}
	fi, err := u.root.Lstat(dir)
	switch {
	case errors.Is(err, fs.ErrNotExist):
		if u.entries++; u.entries > u.lim.MaxEntries {
			return entryErr(entry, "layer has more than %d entries (counting the parent directories it creates)", u.lim.MaxEntries)
		}
		if err := u.root.Mkdir(dir, 0o755); err != nil {
			return entryErr(entry, "creating parent %q: %v", dir, err)
		}
	case err != nil:
		return entryErr(entry, "parent %q: %v", dir, err)
	case fi.Mode()&fs.ModeSymlink != 0:
		target, _ := u.root.Readlink(dir)
		return entryErr(entry, "escapes the root: parent %q is a symlink (to %q)", dir, target)
	case !fi.IsDir():
		return entryErr(entry, "parent %q is not a directory", dir)
	}
	u.okDirs[dir] = true
	return nil
}

// clear removes whatever is at name so a new entry can take its place.
func (u *unpacker) clear(entry, name string) error {
	fi, err := u.root.Lstat(name)
	if errors.Is(err, fs.ErrNotExist) {
		return nil
	}
	if err != nil {
		return entryErr(entry, "%v", err)
	}
	if fi.IsDir() {
		clear(u.okDirs)
		u.okDirs["."] = true
		err = u.root.RemoveAll(name)
	} else {
		err = u.root.Remove(name)
	}
	if err != nil {
		return entryErr(entry, "replacing existing entry: %v", err)
	}
	return nil
}

func (u *unpacker) mkdir(hdr *tar.Header, name string) error {
	fi, err := u.root.Lstat(name)
	if err != nil || !fi.IsDir() {
		if err := u.clear(hdr.Name, name); err != nil {
			return err
		}
		if err := u.root.Mkdir(name, 0o700); err != nil {
			return entryErr(hdr.Name, "mkdir: %v", err)
		}
	}
	u.okDirs[name] = true
	u.dirs = append(u.dirs, dirTime{name, hdr.ModTime})
	return u.meta(hdr, name, true)
}

func (u *unpacker) file(hdr *tar.Header, name string, r io.Reader) error {
	if hdr.Size < 0 || hdr.Size > u.lim.MaxFileBytes {
		return entryErr(hdr.Name, "file of %d bytes exceeds the limit of %d", hdr.Size, u.lim.MaxFileBytes)
	}
	if u.written+hdr.Size > u.lim.MaxLayerBytes {
		return u.tooBig(hdr.Name)
	}
	if err := u.clear(hdr.Name, name); err != nil {
		return err
	}
	f, err := u.root.OpenFile(name, os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o600)
	if err != nil {
		return entryErr(hdr.Name, "create: %v", err)
	}
	n, err := io.Copy(f, io.LimitReader(r, hdr.Size))
	u.written += n
	if err == nil && n != hdr.Size {
		err = io.ErrUnexpectedEOF
	}
	if err == nil {
		err = u.fileMeta(hdr, f)
	}
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		return entryErr(hdr.Name, "writing file: %v", err)
	}
	if err := u.root.Chtimes(name, hdr.AccessTime, hdr.ModTime); err != nil {
		return entryErr(hdr.Name, "times: %v", err)
	}
	return nil
}

// fileMeta sets owner, mode and the kept extended attributes on an open file.
func (u *unpacker) fileMeta(hdr *tar.Header, f *os.File) error {
	if u.chown {
		if err := f.Chown(hdr.Uid, hdr.Gid); err != nil {
			return err
		}
	}
	// Chmod after chown: chown clears setuid and setgid.
	if err := f.Chmod(tarMode(hdr)); err != nil {
		return err
	}
	for k, v := range hdr.PAXRecords {
		attr, ok := strings.CutPrefix(k, "SCHILY.xattr.")
		if !ok || !(attr == "security.capability" || strings.HasPrefix(attr, "user.")) {
			continue
		}
		if err := unix.Fsetxattr(int(f.Fd()), attr, []byte(v), 0); err != nil && !errors.Is(err, unix.ENOTSUP) {
			return fmt.Errorf("xattr %s: %w", attr, err)
		}
	}
	return nil
}

// meta sets owner and (for non-symlinks) mode on an entry by name.
func (u *unpacker) meta(hdr *tar.Header, name string, chmod bool) error {
	if u.chown {
		if err := u.root.Lchown(name, hdr.Uid, hdr.Gid); err != nil {
			return entryErr(hdr.Name, "chown: %v", err)
		}
	}
	if chmod {
		if err := u.root.Chmod(name, tarMode(hdr)); err != nil {
			return entryErr(hdr.Name, "chmod: %v", err)
		}
	}
	return nil
}

func tarMode(hdr *tar.Header) fs.FileMode {
	return hdr.FileInfo().Mode() & (fs.ModePerm | fs.ModeSetuid | fs.ModeSetgid | fs.ModeSticky)
}

func (u *unpacker) hardlink(hdr *tar.Header, name string) error {
	target, err := cleanName(hdr.Linkname)
	if err != nil {
		return entryErr(hdr.Name, "hardlink target %q: %v", hdr.Linkname, err)
	}
	if u.devSkipped[target] {
		if !underDev(name) {
			return devErr(hdr.Name)
		}
		u.devSkipped[name] = true
		return nil
	}
	if err := u.ensureDir(hdr.Name, path.Dir(target)); err != nil {
		return err
	}
	fi, err := u.root.Lstat(target)
	if err != nil {
		return entryErr(hdr.Name, "hardlink target %q does not exist in the layer", hdr.Linkname)
	}
	if !fi.Mode().IsRegular() && fi.Mode()&(fs.ModeSymlink|fs.ModeNamedPipe) == 0 {
		return entryErr(hdr.Name, "hardlink target %q is not a file", hdr.Linkname)
	}
	if target == name {
		return nil
	}
	if err := u.clear(hdr.Name, name); err != nil {
		return err
	}
	if err := u.root.Link(target, name); err != nil {
		return entryErr(hdr.Name, "hardlink: %v", err)
	}
	return nil
}

// mknod creates a node in dir, a directory already checked by ensureDir.
func (u *unpacker) mknod(entry, dir, base string, mode uint32) error {
	d, err := u.root.Open(dir)
	if err != nil {
		return entryErr(entry, "%v", err)
	}
	defer d.Close()
	if err := unix.Mknodat(int(d.Fd()), base, mode, 0); err != nil {
		return entryErr(entry, "mknod: %v", err)
	}
	return nil
}

// whiteout records that the lower layers' dir/target is deleted: a char
// device 0:0 in overlayfs.
func (u *unpacker) whiteout(entry, dir, target string) error {
	if target == "" || target == "." || target == ".." || strings.Contains(target, "/") {
		return entryErr(entry, "malformed whiteout")
	}
	name := path.Join(dir, target)
	if err := u.clear(entry, name); err != nil {
		return err
	}
	return u.mknod(entry, dir, target, unix.S_IFCHR)
}

// opaque marks dir so overlayfs hides the lower layers' content of it.
func (u *unpacker) opaque(entry, dir string) error {
	d, err := u.root.Open(dir)
	if err != nil {
		return entryErr(entry, "%v", err)
	}
	defer d.Close()
	if err := unix.Fsetxattr(int(d.Fd()), opaqueXattr, []byte("y"), 0); err != nil {
		return entryErr(entry, "marking %q opaque: %v", dir, err)
	}
	return nil
}

// finishDirs sets directory times last, since creating their content moved
// them. A directory replaced since is skipped.
func (u *unpacker) finishDirs() {
	for i := len(u.dirs) - 1; i >= 0; i-- {
		d := u.dirs[i]
		if fi, err := u.root.Lstat(d.name); err == nil && fi.IsDir() {
			_ = u.root.Chtimes(d.name, d.mtime, d.mtime)
		}
	}
}
