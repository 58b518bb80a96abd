// Package volume keeps the apps' volumes on this host, under
// <apps>/<app>/volumes/<name>. A volume is made at a replica's first start
// on the host: filled with what the image has at its path (copy-up, owners
// and modes kept, shifted into the app's user namespace as the rest of the
// root file system is) and its root directory given to the image's user or
// the volume's uid and gid. Service lists, archives, fills and removes
// volumes for `shoal volume`; a volume stays when its app is deleted
// unless asked.
package volume

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	goruntime "runtime"
	"strings"
	"sync"

	"golang.org/x/sys/unix"

	"github.com/shoal-run/shoal/internal/errdefs"
	"github.com/shoal-run/shoal/internal/manifest"
	"github.com/shoal-run/shoal/internal/runtime"
	"github.com/shoal-run/shoal/internal/units"
	"github.com/shoal-run/shoal/internal/userns"
)

// DefaultMaxBytes bounds what a copy-up or an import writes into a volume
// when nothing else does (an app without a disk limit, an import without
// --max-size): the bytes of its files.
const DefaultMaxBytes = 4 << 30

// Mount is a volume of a replica about to start.
type Mount struct {
	Dir   string // on the host: <apps>/<app>/volumes/<name>
	Path  string // in the container
	Owner manifest.VolumeOwner
}

// Image is what a volume takes from the replica's image.
type Image struct {
	Layers []string // snapshot directories, bottom first, as unpacked (not idmapped)
	User   string   // its config's User
}

// Preparer makes volumes before the replicas that mount them start. It
// remembers the ids of images' users.
type Preparer struct {
	mu    sync.Mutex
	users map[string][2]uint32
}

// Prepare makes the volumes vols of a replica of img whose user namespace
// starts at host id host (0: none): a volume not there yet is made from
// the image's content at its path (in a folder beside it, renamed into
// place, so a crash leaves no half volume and two replicas starting at
// once make it once); one there already has its owners shifted into the
// range when it belongs to another (kept from an app deployed again). A
// new volume's root is given to its owner (the image's user, or the
// manifest's uid and gid); one there already to the ids the manifest
// gives, if any. A copy-up stops when ctx ends, and is refused when the
// image's files at the path hold more than limit bytes (0: DefaultMaxBytes);
// nothing of it is left.
func (p *Preparer) Prepare(ctx context.Context, vols []Mount, img Image, host uint32, limit int64) error {
	if len(vols) == 0 {
		return nil
	}
	var missing []int
	for i, v := range vols {
		if _, err := os.Lstat(v.Dir); errors.Is(err, os.ErrNotExist) {
			missing = append(missing, i)
		} else if err != nil {
			return fmt.Errorf("volume %s: %w", filepath.Base(v.Dir), err)
		}
	}
	needUser := false
	for _, v := range vols {
		needUser = needUser || v.Owner.UID < 0 || v.Owner.GID < 0
	}
	key := strings.Join(img.Layers, ":") + "\x00" + img.User
	p.mu.Lock()
	ids, known := p.users[key]
	p.mu.Unlock()
	if needUser && !known && img.User == "" {
		ids, known = [2]uint32{0, 0}, true
	}
	tmps := make([]string, len(vols))
	defer func() {
		for _, t := range tmps {
			if t != "" {
				os.RemoveAll(t)
			}
		}
	}()
	if len(missing) > 0 || (needUser && !known) {
		parent := filepath.Dir(vols[0].Dir)
		if err := os.MkdirAll(parent, 0o755); err != nil {
			return fmt.Errorf("volumes: %w", err)
		}
		for _, i := range missing {
			tmps[i] = tempName(vols[i].Dir, "new")
		}
		err := withImage(img.Layers, parent, func(rootfs string) error {
			if needUser && !known {
				uid, gid, err := runtime.LookupUser(rootfs, img.User)
				if err != nil {
					return fmt.Errorf("the image's user: %w", err)
				}
				ids = [2]uint32{uid, gid}
			}
			for _, i := range missing {
				if err := copyUp(ctx, rootfs, vols[i].Path, tmps[i], limit); err != nil {
					return fmt.Errorf("volume %s: copy the image's %s: %w", filepath.Base(vols[i].Dir), vols[i].Path, err)
				}
			}
			return nil
		})
		if err != nil {
			return err
		}
		if needUser {
			p.mu.Lock()
			if p.users == nil {
				p.users = map[string][2]uint32{}
			}
			p.users[key] = ids
			p.mu.Unlock()
		}
	}
	for i, v := range vols {
		name := filepath.Base(v.Dir)
		uid, gid := uint32(v.Owner.UID), uint32(v.Owner.GID)
		if v.Owner.UID < 0 {
			uid = ids[0]
		}
		if v.Owner.GID < 0 {
			gid = ids[1]
		}
		if host != 0 {
			uid, gid = host+min(uid, userns.Size-1), host+min(gid, userns.Size-1)
		}
		if t := tmps[i]; t != "" {
			if host != 0 {
				if err := userns.Shift(t, host); err != nil {
					return fmt.Errorf("volume %s: %w", name, err)
				}
			}
			if err := os.Lchown(t, int(uid), int(gid)); err != nil {
				return fmt.Errorf("volume %s: %w", name, err)
			}
			err := unix.Renameat2(unix.AT_FDCWD, t, unix.AT_FDCWD, v.Dir, unix.RENAME_NOREPLACE)
			if err == nil {
				tmps[i] = ""
				continue
			}
			if !errors.Is(err, unix.EEXIST) {
				return fmt.Errorf("volume %s: %w", name, err)
			}
			// Made by a replica that started at the same time.
		}
		if host != 0 {
			if err := userns.Own(v.Dir, host); err != nil {
				return fmt.Errorf("volume %s: %w", name, err)
			}
		}
		var st unix.Stat_t
		if err := unix.Lstat(v.Dir, &st); err != nil {
			return fmt.Errorf("volume %s: %w", name, err)
		}
		if st.Mode&unix.S_IFMT != unix.S_IFDIR {
			return fmt.Errorf("volume %s: %s is not a directory", name, v.Dir)
		}
		// A volume there already keeps its root's owner but for the ids
		// the manifest gives.
		if v.Owner.UID < 0 {
			uid = st.Uid
		}
		if v.Owner.GID < 0 {
			gid = st.Gid
		}
		if st.Uid != uid || st.Gid != gid {
			if err := os.Lchown(v.Dir, int(uid), int(gid)); err != nil {
				return fmt.Errorf("volume %s: %w", name, err)
			}
		}
	}
	return nil
}

// tempName is a name beside dir for a folder made before it takes dir's
// place: volume names are DNS labels, so a name starting with a dot is
// never a volume's.
func tempName(dir, what string) string {
	b := make([]byte, 4)
	rand.Read(b)
	return filepath.Join(filepath.Dir(dir), "."+filepath.Base(dir)+"."+what+"-"+hex.EncodeToString(b))
}

// copyUp makes tmp, a copy of the image's directory at path (an empty
// folder if the image has none there), with the owners, modes, times and
// extended attributes of the image's files. Files of more than limit
// bytes in all (0: DefaultMaxBytes) are refused before anything is copied.
func copyUp(ctx context.Context, rootfs, path, tmp string, limit int64) error {
	root, err := unix.Open(rootfs, unix.O_PATH|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
	if err != nil {
		return err
	}
	defer unix.Close(root)
	fd, err := unix.Openat2(root, strings.TrimPrefix(path, "/"), &unix.OpenHow{
		Flags:   unix.O_PATH | unix.O_CLOEXEC,
		Resolve: unix.RESOLVE_IN_ROOT | unix.RESOLVE_NO_MAGICLINKS,
	})
	var st unix.Stat_t
	if err == nil {
		defer unix.Close(fd)
		err = unix.Fstat(fd, &st)
	}
	if err != nil || st.Mode&unix.S_IFMT != unix.S_IFDIR {
		// Nothing to copy (or no directory: the mount fails as it would
		// have).
		return os.Mkdir(tmp, 0o755)
	}
	src, err := os.Readlink(fmt.Sprintf("/proc/self/fd/%d", fd))
	if err != nil {
		return err
	}
	if err := checkSize(ctx, src, limit); err != nil {
		return err
	}
	if err := os.Mkdir(tmp, 0o700); err != nil {
		return err
	}
	if out, err := exec.CommandContext(ctx, "cp", "-a", "--reflink=auto", "--", src+"/.", tmp+"/").CombinedOutput(); err != nil {
		if ctx.Err() != nil {
			return ctx.Err()
		}
		return fmt.Errorf("%w: %s", err, strings.TrimSpace(string(out)))
	}
	return os.Chmod(tmp, os.FileMode(st.Mode&0o777)|modeBits(st.Mode))
}

// checkSize fails when the regular files under dir hold more than limit
// bytes (0: DefaultMaxBytes), or when ctx ends.
func checkSize(ctx context.Context, dir string, limit int64) error {
	if limit <= 0 {
		limit = DefaultMaxBytes
	}
	var total int64
	return filepath.WalkDir(dir, func(p string, d os.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if err := ctx.Err(); err != nil {
			return err
		}
		if !d.Type().IsRegular() {
			return nil
		}
		fi, err := d.Info()
		if err != nil {
			return err
		}
		if total += fi.Size(); total > limit {
			return fmt.Errorf("its files hold more than %s, the limit (the app's resources.disk, or %s without one): %w",
				units.FormatBytes(limit), units.FormatBytes(DefaultMaxBytes), errdefs.ErrInvalid)
		}
		return nil
	})
}

// modeBits is the sticky and set-id bits of a stat mode as an os.FileMode.
func modeBits(m uint32) os.FileMode {
	var f os.FileMode
	if m&unix.S_ISVTX != 0 {
		f |= os.ModeSticky
	}
	if m&unix.S_ISGID != 0 {
		f |= os.ModeSetgid
	}
	if m&unix.S_ISUID != 0 {
		f |= os.ModeSetuid
	}
	return f
}

// withImage runs fn with the image's layers mounted read-only at rootfs,
// in a mount namespace of a thread of its own that ends with it: no mount
// is left on the host, whatever happens. The mount point is made in dir
// and removed.
func withImage(layers []string, dir string, fn func(rootfs string) error) error {
	if len(layers) == 0 {
		return errors.New("the image has no layers")
	}
	errc := make(chan error, 1)
	go func() {
		// Never unlocked: the thread, and its mount namespace, end with
		// this goroutine.
		goruntime.LockOSThread()
		if unix.Gettid() == unix.Getpid() {
			// The main thread, which Go parks for good instead of ending:
			// its namespace would stay, holding a copy of every mount of
			// the moment (overlays, disks' loop devices) and shown as the
			// process's in /proc/self. Hold it while another thread works.
			errc <- withImage(layers, dir, fn)
			goruntime.UnlockOSThread()
			return
		}
		errc <- func() error {
			if err := unix.Unshare(unix.CLONE_NEWNS); err != nil {
				return fmt.Errorf("mount namespace: %w", err)
			}
			if err := unix.Mount("", "/", "", unix.MS_REC|unix.MS_PRIVATE, ""); err != nil {
				return fmt.Errorf("mount namespace: %w", err)
			}
			mp := tempName(filepath.Join(dir, "image"), "root")
			empty := tempName(filepath.Join(dir, "image"), "empty")
			for _, d := range []string{mp, empty} {
				if err := os.Mkdir(d, 0o700); err != nil {
					return err
				}
				defer os.Remove(d)
			}
			lower := make([]string, 0, len(layers)+1)
			for i := len(layers) - 1; i >= 0; i-- {
				lower = append(lower, layers[i])
			}
			// Below the layers, an empty one: overlayfs wants two lower
			// directories when it has no upper one.
			lower = append(lower, empty)
			data := "lowerdir=" + strings.Join(lower, ":")
			if len(data) >= os.Getpagesize() {
				return fmt.Errorf("%d layers make overlay options above the kernel's limit", len(layers))
			}
			if err := unix.Mount("overlay", mp, "overlay", unix.MS_RDONLY, data); err != nil {
				return fmt.Errorf("mount the image's layers: %w", err)
			}
			defer unix.Unmount(mp, unix.MNT_DETACH)
			return fn(mp)
		}()
	}()
	return <-errc
}
