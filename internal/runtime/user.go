package runtime

import (
	"bufio"
	"bytes"
	"fmt"
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

// resolveUser turns Spec.User into ids, reading /etc/passwd and /etc/group
// inside rootfs (without following links out of it) when names are used.
func resolveUser(rootfs, spec string) (user, error) {
	u := user{}
	if spec == "" {
		spec = "0"
	}
	name, group, hasGroup := strings.Cut(spec, ":")
	if name == "" || (hasGroup && group == "") {
		return u, errdefs.Invalid("user", "%q is not uid[:gid] or name[:group]", spec)
	}
	if uid, err := strconv.ParseUint(name, 10, 32); err == nil {
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
			return u, errdefs.Invalid("user", "user %q: cannot read /etc/passwd in the image: %v", name, err)
		}
		e, ok := findEntry(pw, 0, name)
		if !ok {
			return u, errdefs.Invalid("user", "user %q is not in the image's /etc/passwd", name)
		}
		u.UID, u.GID, u.Home = parseID(e[2]), parseID(e[3]), e[5]
	}
	grp, _ := readRootfsFile(rootfs, "/etc/group")
	if hasGroup {
		if gid, err := strconv.ParseUint(group, 10, 32); err == nil {
			u.GID = uint32(gid)
		} else {
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

// readRootfsFile reads name as if rootfs were /, so that symbolic links in the
// image cannot point the daemon at host files.
func readRootfsFile(rootfs, name string) ([]byte, error) {
	dir, err := unix.Open(rootfs, unix.O_PATH|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
	if err != nil {
		return nil, fmt.Errorf("open %s: %w", rootfs, err)
	}
	defer unix.Close(dir)
	fd, err := unix.Openat2(dir, name, &unix.OpenHow{Flags: unix.O_RDONLY | unix.O_CLOEXEC, Resolve: unix.RESOLVE_IN_ROOT | unix.RESOLVE_NO_MAGICLINKS})
	if err != nil {
		return nil, fmt.Errorf("open %s in %s: %w", name, rootfs, err)
	}
	f := os.NewFile(uintptr(fd), name)
	defer f.Close()
	var buf bytes.Buffer
	if _, err := buf.ReadFrom(f); err != nil {
		return nil, err
	}
	return buf.Bytes(), nil
}
