// Command probe is what the reusable sandbox tests run inside a job to
// leave behind what busybox cannot: each subcommand prints one line per
// attempt, "NAME: ok" or "NAME: ERROR".
package main

import (
	"encoding/binary"
	"fmt"
	"os"
	"strconv"

	"golang.org/x/sys/unix"
)

func main() {
	if len(os.Args) < 2 {
		fmt.Fprintln(os.Stderr, "usage: probe deep DIR N | xattr PATH... | list PATH... | flags PATH... | chattr PATH... | slice NS | getslice | timewait PORT | bind PORT")
		os.Exit(2)
	}
	args := os.Args[2:]
	switch os.Args[1] {
	case "deep":
		n, _ := strconv.Atoi(args[1])
		report("deep "+args[0], deep(args[0], n))
	case "xattr":
		for _, p := range args {
			report("xattr "+p, xattrs(p))
		}
	case "list":
		for _, p := range args {
			names, err := listXattrs(p)
			if err != nil {
				fmt.Printf("list %s: %v\n", p, err)
			} else {
				fmt.Printf("list %s: %q\n", p, names)
			}
		}
	case "flags":
		for _, p := range args {
			flags, err := inodeFlags(p, 0)
			if err != nil {
				fmt.Printf("flags %s: %v\n", p, err)
			} else {
				fmt.Printf("flags %s: %#x\n", p, flags)
			}
		}
	case "chattr":
		for _, p := range args {
			_, err := inodeFlags(p, 0x80|0x40) // FS_NOATIME_FL, FS_NODUMP_FL
			report("chattr "+p, err)
		}
	case "slice":
		// The time slice every thread of pid 1 asks of the scheduler.
		ns, _ := strconv.ParseUint(args[0], 10, 64)
		tids, err := os.ReadDir("/proc/1/task")
		for _, t := range tids {
			tid, _ := strconv.Atoi(t.Name())
			if err = unix.SchedSetAttr(tid, &unix.SchedAttr{Runtime: ns}, 0); err != nil {
				break
			}
		}
		report("slice", err)
	case "getslice":
		a, err := unix.SchedGetAttr(0, 0)
		if err != nil {
			report("getslice", err)
		} else {
			fmt.Printf("getslice: %d\n", a.Runtime)
		}
	case "timewait":
		report("timewait", timeWait(port(args[0])))
	case "bind":
		fd, err := listen(port(args[0]))
		if err == nil {
			unix.Close(fd)
		}
		report("bind", err)
	default:
		fmt.Fprintln(os.Stderr, "unknown subcommand", os.Args[1])
		os.Exit(2)
	}
}

func report(what string, err error) {
	if err != nil {
		fmt.Printf("%s: %v\n", what, err)
		return
	}
	fmt.Printf("%s: ok\n", what)
}

// deep makes a chain of n directories below dir, holding one descriptor
// at a time.
func deep(dir string, n int) error {
	fd, err := unix.Open(dir, unix.O_RDONLY|unix.O_DIRECTORY, 0)
	if err != nil {
		return err
	}
	for i := 0; i < n; i++ {
		if err := unix.Mkdirat(fd, "d", 0o755); err != nil {
			return fmt.Errorf("level %d: %w", i, err)
		}
		next, err := unix.Openat(fd, "d", unix.O_RDONLY|unix.O_DIRECTORY, 0)
		unix.Close(fd)
		if err != nil {
			return fmt.Errorf("level %d: %w", i, err)
		}
		fd = next
	}
	return unix.Close(fd)
}

// xattrs sets a user extended attribute and an access and a default ACL
// granting uid 1234 everything on path.
func xattrs(path string) error {
	if err := unix.Setxattr(path, "user.left", []byte("1"), 0); err != nil {
		return fmt.Errorf("user.left: %w", err)
	}
	acl := binary.LittleEndian.AppendUint32(nil, 2) // version
	for _, e := range []struct {
		tag, perm uint16
		id        uint32
	}{{0x01, 7, 0}, {0x02, 7, 1234}, {0x04, 5, 0}, {0x10, 7, 0}, {0x20, 5, 0}} {
		acl = binary.LittleEndian.AppendUint16(acl, e.tag)
		acl = binary.LittleEndian.AppendUint16(acl, e.perm)
		acl = binary.LittleEndian.AppendUint32(acl, e.id)
	}
	for _, name := range []string{"system.posix_acl_access", "system.posix_acl_default"} {
		if err := unix.Setxattr(path, name, acl, 0); err != nil {
			return fmt.Errorf("%s: %w", name, err)
		}
	}
	return nil
}

func listXattrs(path string) (string, error) {
	buf := make([]byte, 4096)
	n, err := unix.Listxattr(path, buf)
	if err != nil {
		return "", err
	}
	return string(buf[:n]), nil
}

// inodeFlags returns the inode flags of path (lsattr) after adding set to
// them (chattr).
func inodeFlags(path string, set int) (int, error) {
	fd, err := unix.Open(path, unix.O_RDONLY|unix.O_NONBLOCK, 0)
	if err != nil {
		return 0, err
	}
	defer unix.Close(fd)
	flags, err := unix.IoctlGetInt(fd, unix.FS_IOC_GETFLAGS)
	if err != nil {
		return 0, err
	}
	if set == 0 {
		return flags, nil
	}
	return flags | set, unix.IoctlSetPointerInt(fd, unix.FS_IOC_SETFLAGS, flags|set)
}

func port(s string) int {
	p, err := strconv.Atoi(s)
	if err != nil {
		fmt.Fprintln(os.Stderr, "bad port", s)
		os.Exit(2)
	}
	return p
}

// listen listens on 127.0.0.1:port without SO_REUSEADDR.
func listen(port int) (int, error) {
	fd, err := unix.Socket(unix.AF_INET, unix.SOCK_STREAM, 0)
	if err != nil {
		return -1, err
	}
	if err := unix.Bind(fd, &unix.SockaddrInet4{Port: port, Addr: [4]byte{127, 0, 0, 1}}); err != nil {
		unix.Close(fd)
		return -1, err
	}
	if err := unix.Listen(fd, 1); err != nil {
		unix.Close(fd)
		return -1, err
	}
	return fd, nil
}

// timeWait leaves a connection in TIME_WAIT on 127.0.0.1:port: the
// listening side closes first.
func timeWait(port int) error {
	l, err := listen(port)
	if err != nil {
		return err
	}
	defer unix.Close(l)
	c, err := unix.Socket(unix.AF_INET, unix.SOCK_STREAM, 0)
	if err != nil {
		return err
	}
	defer unix.Close(c)
	if err := unix.Connect(c, &unix.SockaddrInet4{Port: port, Addr: [4]byte{127, 0, 0, 1}}); err != nil {
		return err
	}
	s, _, err := unix.Accept(l)
	if err != nil {
		return err
	}
	unix.Close(s)
	buf := make([]byte, 1)
	unix.Read(c, buf) // the listening side's FIN
	return nil
}
