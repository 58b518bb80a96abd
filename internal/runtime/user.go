package runtime

import (
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"io"
	"os"
	"strconv"
	"strings"

	"golang.org/x/sys/unix"

	"github.com/shoal-run/shoal/internal/errdefs"
)

var rlimitResources = map[string]int{
	"RLIMIT_AS": unix.RLIMIT_AS, "RLIMIT_CORE": unix.RLIMIT_CORE, "RLIMIT_CPU": unix.RLIMIT_CPU,
	"RLIMIT_DATA": unix.RLIMIT_DATA, "RLIMIT_FSIZE": unix.RLIMIT_FSIZE, "RLIMIT_LOCKS": 10,
	"RLIMIT_MEMLOCK": unix.RLIMIT_MEMLOCK, "RLIMIT_MSGQUEUE": 12, "RLIMIT_NICE": 13,
	"RLIMIT_NOFILE": unix.RLIMIT_NOFILE, "RLIMIT_NPROC": unix.RLIMIT_NPROC,
	"RLIMIT_RSS": unix.RLIMIT_RSS, "RLIMIT_RTPRIO": 14, "RLIMIT_RTTIME": 15,
	"RLIMIT_SIGPENDING": 11, "RLIMIT_STACK": unix.RLIMIT_STACK,
}

// hostRlimits reads the hard limits of this process, which bound what a
// container may be given.
func hostRlimits() map[string]uint64 {
	out := map[string]uint64{}
	for name, res := range rlimitResources {
		var rl unix.Rlimit
		if err := unix.Getrlimit(res, &rl); err == nil {
			out[name] = rl.Max
		}
	}
	return out
}

// resolveUser turns Spec.User into ids. Root ("" or uid 0) needs no lookup:
// it gets gid 0 (unless given), HOME=/root and no supplementary groups.
// Other numeric users read the image's /etc/passwd and /etc/group when they
// can, for the primary group, home directory and supplementary groups, and
// fall back to the given ids when those files are missing or unreadable.
// Names must be found there. The files are read inside rootfs (without
// following links out of it), only if they are regular files, and only up to
// maxAccountFile bytes.
func resolveUser(rootfs, spec string) (user, error) {
	u := user{}
	if spec == "" {
		spec = "0"
	}
	name, group, hasGroup := strings.Cut(spec, ":")
	if name == "" || (hasGroup && group == "") {
		return u, errdefs.Invalid("user", "%q is not uid[:gid] or name[:group]", spec)
	}
	uid, uidErr := strconv.ParseUint(name, 10, 32)
	gid, gidErr := strconv.ParseUint(group, 10, 32)
	if uidErr == nil && uid == 0 && (!hasGroup || gidErr == nil) {
		u.GID = uint32(gid)
		u.Home = "/root"
		return u, nil
	}
	if uidErr == nil {
		u.UID = uint32(uid)
		if pw, err := readRootfsFile(rootfs, "/etc/passwd"); err == nil {
			if e, ok := findEntry(pw, 2, name); ok {
				u.GID = parseID(e[3])
				u.Home = e[5]
				name = e[0]
			}
		}
	} else {
		pw, err := readRootfsFile(rootfs, "/etc/passwd")
		if err != nil {
			return u, errdefs.Invalid("user", "user %q: cannot read the image's /etc/passwd: %v", name, err)
		}
		e, ok := findEntry(pw, 0, name)
		if !ok {
			return u, errdefs.Invalid("user", "user %q is not in the image's /etc/passwd", name)
		}
		u.UID, u.GID, u.Home = parseID(e[2]), parseID(e[3]), e[5]
	}
	grp, grpErr := readRootfsFile(rootfs, "/etc/group")
	if hasGroup {
		if gidErr == nil {
			u.GID = uint32(gid)
		} else {
			if grpErr != nil {
				return u, errdefs.Invalid("user", "group %q: cannot read the image's /etc/group: %v", group, grpErr)
			}
			e, ok := findEntry(grp, 0, group)
			if !ok {
				return u, errdefs.Invalid("user", "group %q is not in the image's /etc/group", group)
			}
			u.GID = parseID(e[2])
		}
	}
	// Supplementary groups: every group listing the user by name.
	for _, line := range bytes.Split(grp, []byte("\n")) {
		f := strings.Split(string(line), ":")
		if len(f) < 4 || f[3] == "" {
			continue
		}
		for _, m := range strings.Split(f[3], ",") {
			if m == name {
				if gid := parseID(f[2]); gid != u.GID {
					u.Groups = append(u.Groups, gid)
				}
			}
		}
	}
	return u, nil
}

// findEntry finds the passwd/group line whose field col equals val.
func findEntry(data []byte, col int, val string) ([]string, bool) {
	sc := bufio.NewScanner(bytes.NewReader(data))
	for sc.Scan() {
		line := sc.Text()
		if strings.HasPrefix(line, "#") {
			continue
		}
		f := strings.Split(line, ":")
		if len(f) < 4 || f[col] != val {
			continue
		}
		for len(f) < 7 {
			f = append(f, "")
		}
		return f, true
	}
	return nil, false
}

func parseID(s string) uint32 {
	v, _ := strconv.ParseUint(s, 10, 32)
	return uint32(v)
}

// maxAccountFile bounds what is read of an image's /etc/passwd or
// /etc/group.
const maxAccountFile = 1 << 20

// readRootfsFile reads name as if rootfs were /, so that symbolic links in the
// image cannot point the daemon at host files. Only a regular file of at most
// maxAccountFile bytes is read: the file is first opened with O_PATH, which
// cannot block on a FIFO or act on a device, and reopened for reading only
// once fstat says it is a regular file.
func readRootfsFile(rootfs, name string) ([]byte, error) {
	dir, err := unix.Open(rootfs, unix.O_PATH|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
	if err != nil {
		return nil, fmt.Errorf("open %s: %w", rootfs, err)
	}
	defer unix.Close(dir)
	pfd, err := unix.Openat2(dir, name, &unix.OpenHow{
		Flags:   unix.O_PATH | unix.O_CLOEXEC,
		Resolve: unix.RESOLVE_IN_ROOT | unix.RESOLVE_NO_MAGICLINKS,
	})
	if err != nil {
		return nil, fmt.Errorf("open %s: %w", name, err)
	}
	defer unix.Close(pfd)
	var st unix.Stat_t
	if err := unix.Fstat(pfd, &st); err != nil {
		return nil, fmt.Errorf("stat %s: %w", name, err)
	}
	if st.Mode&unix.S_IFMT != unix.S_IFREG {
		return nil, fmt.Errorf("%s is not a regular file (%s)", name, fileType(st.Mode))
	}
	if st.Size > maxAccountFile {
		return nil, fmt.Errorf("%s is %d bytes, above the limit of %d", name, st.Size, maxAccountFile)
	}
	// Reopen the very inode found above through this process's fd table.
	fd, err := unix.Open(fmt.Sprintf("/proc/self/fd/%d", pfd), unix.O_RDONLY|unix.O_CLOEXEC|unix.O_NONBLOCK|unix.O_NOCTTY, 0)
	if err != nil {
		return nil, fmt.Errorf("open %s: %w", name, err)
	}
	f := os.NewFile(uintptr(fd), name)
	defer f.Close()
	b, err := io.ReadAll(io.LimitReader(f, maxAccountFile+1))
	if err != nil {
		return nil, fmt.Errorf("read %s: %w", name, err)
	}
	if len(b) > maxAccountFile {
		return nil, fmt.Errorf("%s is above the limit of %d bytes", name, maxAccountFile)
	}
	return b, nil
}

// accountFiles are what the OCI runtime itself opens inside the container
// for every process it starts, whatever the user.
var accountFiles = []string{"/etc/passwd", "/etc/group"}

// checkAccountFiles refuses an image whose /etc/passwd or /etc/group exists
// but is not a regular file (a FIFO, device, socket or directory), or is a
// link to nothing in the image (it would resolve to the container's /dev or
// /proc instead): the runtime's init reads these files with a plain open(2)
// before starting the process, and would block on a FIFO for ever.
func checkAccountFiles(rootfs string) error {
	dir, err := unix.Open(rootfs, unix.O_PATH|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
	if err != nil {
		return fmt.Errorf("open %s: %w", rootfs, err)
	}
	defer unix.Close(dir)
	for _, name := range accountFiles {
		fd, err := unix.Openat2(dir, name, &unix.OpenHow{
			Flags:   unix.O_PATH | unix.O_CLOEXEC,
			Resolve: unix.RESOLVE_IN_ROOT | unix.RESOLVE_NO_MAGICLINKS,
		})
		if errors.Is(err, unix.ENOENT) {
			// Missing is fine, unless a link is there.
			lfd, lerr := unix.Openat2(dir, name, &unix.OpenHow{
				Flags:   unix.O_PATH | unix.O_NOFOLLOW | unix.O_CLOEXEC,
				Resolve: unix.RESOLVE_IN_ROOT | unix.RESOLVE_NO_MAGICLINKS,
			})
			if lerr == nil {
				unix.Close(lfd)
				return fmt.Errorf("image file %s is a link to nothing in the image: %w", name, errdefs.ErrInvalid)
			}
			continue
		}
		if err != nil {
			return fmt.Errorf("image file %s: %w: %w", name, err, errdefs.ErrInvalid)
		}
		var st unix.Stat_t
		err = unix.Fstat(fd, &st)
		unix.Close(fd)
		if err != nil {
			return fmt.Errorf("image file %s: %w", name, err)
		}
		if st.Mode&unix.S_IFMT != unix.S_IFREG {
			return fmt.Errorf("image file %s is not a regular file (%s): %w", name, fileType(st.Mode), errdefs.ErrInvalid)
		}
	}
	return nil
}

func fileType(mode uint32) string {
	switch mode & unix.S_IFMT {
	case unix.S_IFIFO:
		return "a FIFO"
	case unix.S_IFCHR:
		return "a character device"
	case unix.S_IFBLK:
		return "a block device"
	case unix.S_IFSOCK:
		return "a socket"
	case unix.S_IFDIR:
		return "a directory"
	}
	return fmt.Sprintf("mode %#o", mode&unix.S_IFMT)
}

// LookupUser is the uid and gid an image's user (its config's User: a
// name or id, with a group or not) has in the root file system rootfs, as
// a container of it would run.
func LookupUser(rootfs, spec string) (uid, gid uint32, err error) {
	u, err := resolveUser(rootfs, spec)
	return u.UID, u.GID, err
}
