package userns

import (
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"

	"golang.org/x/sys/unix"
)

// shiftedCopy copies layer src to target with every owner shifted into the
// range starting at host, unless target is there already. The copy is made
// beside target and renamed into place, so a crash leaves no half copy
// under target's name. cp -a keeps modes, links, device nodes (overlay
// whiteouts) and extended attributes (opaque directories).
func shiftedCopy(src, target string, host uint32) error {
	if _, err := os.Lstat(target); err == nil {
		return nil
	}
	if err := os.MkdirAll(filepath.Dir(target), 0o700); err != nil {
		return err
	}
	b := make([]byte, 4)
	rand.Read(b)
	tmp := target + ".tmp-" + hex.EncodeToString(b)
	defer os.RemoveAll(tmp)
	if out, err := exec.Command("cp", "-a", "--reflink=auto", "--", src, tmp).CombinedOutput(); err != nil {
		return fmt.Errorf("copy %s: %w: %s", src, err, out)
	}
	if err := shiftTree(tmp, host, true); err != nil {
		return err
	}
	return os.Rename(tmp, target)
}

// Own makes dir, a volume or state area, the range's: a folder whose root
// is not owned by ids of the range has every owner in it shifted into the
// range (a file of host uid 0 becomes the range root's; one of another
// range's id n, as a volume kept from an app deleted and deployed again,
// the range's id n). Owners already in the range stay.
func Own(dir string, host uint32) error {
	var st unix.Stat_t
	if err := unix.Lstat(dir, &st); err != nil {
		return err
	}
	if st.Mode&unix.S_IFMT != unix.S_IFDIR || (inRange(st.Uid, host) && inRange(st.Gid, host)) {
		return nil
	}
	return shiftTree(dir, host, false)
}

// Shift shifts the owner of everything under root, a copy of an image's
// files, from the container's ids into the range starting at host.
func Shift(root string, host uint32) error { return shiftTree(root, host, true) }

// inRange reports whether host id id is in the range starting at host.
func inRange(id, host uint32) bool { return id >= host && id < host+Size }

// Unshift is the container's id of host id id: its place in an app's
// range (any app's: ranges are Size apart from Base), else id itself (a
// host that runs apps without user namespaces).
func Unshift(id uint32) uint32 {
	if id >= Base {
		return (id - Base) % Size
	}
	return id
}

// shiftTree shifts the owner of everything under root into the range
// starting at host. Ids already in the range are kept when keep is false
// (a tree shifted before); all are shifted from 0 when it is true (a copy
// of a layer). Chown clears set-id bits: they are put back.
func shiftTree(root string, host uint32, all bool) error {
	return filepath.WalkDir(root, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		var st unix.Stat_t
		if err := unix.Lstat(p, &st); err != nil {
			return err
		}
		uid, gid := st.Uid, st.Gid
		if all {
			uid, gid = shift(uid, host), shift(gid, host)
		}
		if !all && !inRange(uid, host) {
			uid = shift(Unshift(uid), host)
		}
		if !all && !inRange(gid, host) {
			gid = shift(Unshift(gid), host)
		}
		if uid == st.Uid && gid == st.Gid {
			return nil
		}
		if err := unix.Lchown(p, int(uid), int(gid)); err != nil {
			return fmt.Errorf("chown %s: %w", p, err)
		}
		if st.Mode&unix.S_IFMT != unix.S_IFLNK && st.Mode&(unix.S_ISUID|unix.S_ISGID) != 0 {
			if err := unix.Chmod(p, st.Mode&0o7777); err != nil {
				return fmt.Errorf("chmod %s: %w", p, err)
			}
		}
		return nil
	})
}

// probeIdmap checks that layers on dir's file system can be idmapped and
// stacked under an overlay, as replicas' root file systems are: a file of
// host root's must show as the range root's.
func probeIdmap(dir string) (err error) {
	tmp, err := os.MkdirTemp(dir, "probe-")
	if err != nil {
		return err
	}
	defer os.RemoveAll(tmp)
	lower, mapped, upper, work, merged := filepath.Join(tmp, "lower"), filepath.Join(tmp, "mapped"),
		filepath.Join(tmp, "upper"), filepath.Join(tmp, "work"), filepath.Join(tmp, "merged")
	for _, d := range []string{lower, mapped, upper, work, merged} {
		if err := os.Mkdir(d, 0o700); err != nil {
			return err
		}
	}
	if err := os.WriteFile(filepath.Join(lower, "f"), nil, 0o644); err != nil {
		return err
	}
	ns, err := nsOf(Base)
	if err != nil {
		return err
	}
	defer ns.close()
	if err := mountIdmapped(lower, mapped, ns.fd); err != nil {
		return err
	}
	defer unix.Unmount(mapped, unix.MNT_DETACH)
	if err := unix.Mount("overlay", merged, "overlay", 0, "lowerdir="+mapped+",upperdir="+upper+",workdir="+work); err != nil {
		return fmt.Errorf("overlay on an idmapped layer: %w", err)
	}
	defer unix.Unmount(merged, unix.MNT_DETACH)
	var st unix.Stat_t
	if err := unix.Stat(filepath.Join(merged, "f"), &st); err != nil {
		return err
	}
	if st.Uid != Base {
		return errors.New("overlay shows an idmapped layer's file as owned by " + fmt.Sprint(st.Uid))
	}
	return nil
}
