// Command hostile is what a hostile job runs inside a sandbox in the e2e
// suite: each subcommand attempts one kind of escape or exhaustion and
// prints one line per attempt, "NAME: ok" when it succeeded or
// "NAME: ERRNO-TEXT" when the kernel refused it, so that the test reads
// what was contained.
package main

import (
	"errors"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"syscall"
	"time"
	"unsafe"

	"golang.org/x/sys/unix"
)

func main() {
	if len(os.Args) < 2 {
		fmt.Fprintln(os.Stderr, "usage: hostile syscalls|sockets|connect ADDR...|unix PATH...|inodes DIR|fill DIR|mkfifo PATH...|mknod PATH|link OLD NEW|listen ADDR|swap DIR")
		os.Exit(2)
	}
	args := os.Args[2:]
	switch os.Args[1] {
	case "syscalls":
		syscalls()
	case "sockets":
		sockets()
	case "connect":
		for _, a := range args {
			c, err := net.DialTimeout("tcp", a, time.Second)
			if err == nil {
				c.Close()
			}
			report("connect "+a, err)
		}
	case "unix":
		for _, a := range args {
			c, err := net.DialTimeout("unix", a, time.Second)
			if err == nil {
				c.Close()
			}
			report("unix "+a, err)
		}
	case "inodes":
		n, err := 0, error(nil)
		for ; err == nil && n < 10_000_000; n++ {
			var f *os.File
			if f, err = os.Create(filepath.Join(args[0], "i"+strconv.Itoa(n))); err == nil {
				f.Close()
			}
		}
		fmt.Printf("inodes: %d then %v\n", n-1, err)
	case "fill":
		f, err := os.Create(filepath.Join(args[0], "fill"))
		var n int64
		if err == nil {
			buf := make([]byte, 1<<20)
			for err == nil && n < 64<<30 {
				var w int
				w, err = f.Write(buf)
				n += int64(w)
			}
		}
		fmt.Printf("fill: %d bytes then %v\n", n, err)
	case "mkfifo":
		for _, a := range args {
			report("mkfifo "+a, unix.Mkfifo(a, 0o666))
		}
	case "mknod":
		report("mknod "+args[0], unix.Mknod(args[0], unix.S_IFCHR|0o666, int(unix.Mkdev(1, 3))))
		report("mknod-block "+args[0]+"b", unix.Mknod(args[0]+"b", unix.S_IFBLK|0o666, int(unix.Mkdev(8, 0))))
	case "link":
		report("link "+args[0]+" "+args[1], os.Link(args[0], args[1]))
	case "listen":
		l, err := net.Listen(addrNet(args[0]), args[0])
		report("listen "+args[0], err)
		if err == nil {
			for {
				c, err := l.Accept()
				if err != nil {
					return
				}
				fmt.Println("ACCEPTED")
				c.Close()
			}
		}
	case "swap":
		// Swaps DIR/d between a directory and a symlink to / as fast as it
		// can, until killed.
		d, tmp := filepath.Join(args[0], "d"), filepath.Join(args[0], "d.real")
		os.MkdirAll(d, 0o755)
		fmt.Println("swapping")
		for {
			os.Rename(d, tmp)
			os.Symlink("/", d)
			os.Remove(d)
			os.Rename(tmp, d)
		}
	default:
		fmt.Fprintln(os.Stderr, "hostile: unknown command", os.Args[1])
		os.Exit(2)
	}
}

func addrNet(a string) string {
	if len(a) > 0 && (a[0] == '/' || a[0] == '@') {
		return "unix"
	}
	return "tcp"
}

func report(name string, err error) {
	if err == nil {
		fmt.Printf("%s: ok\n", name)
		return
	}
	var errno syscall.Errno
	if errors.As(err, &errno) {
		fmt.Printf("%s: %s\n", name, unix.ErrnoName(errno))
		return
	}
	fmt.Printf("%s: %v\n", name, err)
}

func raw(nr uintptr, a ...uintptr) error {
	var v [6]uintptr
	copy(v[:], a)
	_, _, e := unix.Syscall6(nr, v[0], v[1], v[2], v[3], v[4], v[5])
	if e != 0 {
		return e
	}
	return nil
}

// syscalls attempts the calls a sandbox must refuse. Arguments are valid
// where that matters, so that a refusal is the filter's or the kernel's
// permission check and not a bad argument.
func syscalls() {
	ppid := uintptr(os.Getppid())
	report("ptrace-attach", raw(unix.SYS_PTRACE, unix.PTRACE_ATTACH, ppid))
	report("ptrace-traceme", raw(unix.SYS_PTRACE, unix.PTRACE_TRACEME))
	report("mount", unix.Mount("tmpfs", "/tmp", "tmpfs", 0, ""))
	report("umount", unix.Unmount("/work", unix.MNT_DETACH))
	report("unshare-user", raw(unix.SYS_UNSHARE, unix.CLONE_NEWUSER))
	report("unshare-mount", raw(unix.SYS_UNSHARE, unix.CLONE_NEWNS))
	report("unshare-net", raw(unix.SYS_UNSHARE, unix.CLONE_NEWNET))
	report("clone-newuser", raw(unix.SYS_CLONE, unix.CLONE_NEWUSER|uintptr(unix.SIGCHLD)))
	report("clone3", raw(unix.SYS_CLONE3, 0, 0))
	if f, err := os.Open("/proc/self/ns/net"); err == nil {
		report("setns", raw(unix.SYS_SETNS, f.Fd(), unix.CLONE_NEWNET))
		f.Close()
	}
	desc, typ := []byte("user:x\x00"), []byte("user\x00")
	report("add_key", raw(unix.SYS_ADD_KEY, uintptr(unsafe.Pointer(&typ[0])), uintptr(unsafe.Pointer(&desc[0])), 0, 0, uintptr(0xfffffffd)))
	report("keyctl", raw(unix.SYS_KEYCTL, unix.KEYCTL_GET_KEYRING_ID, uintptr(0xfffffffd), 1))
	var attr [128]byte
	report("bpf", raw(unix.SYS_BPF, unix.BPF_MAP_CREATE, uintptr(unsafe.Pointer(&attr[0])), uintptr(len(attr))))
	report("perf_event_open", raw(unix.SYS_PERF_EVENT_OPEN, uintptr(unsafe.Pointer(&attr[0])), 0, ^uintptr(0), ^uintptr(0), 0))
	var params [120]byte
	report("io_uring_setup", raw(unix.SYS_IO_URING_SETUP, 8, uintptr(unsafe.Pointer(&params[0]))))
	report("userfaultfd", raw(unix.SYS_USERFAULTFD, 0))
	var handle [136]byte
	report("open_by_handle_at", raw(unix.SYS_OPEN_BY_HANDLE_AT, ^uintptr(99), uintptr(unsafe.Pointer(&handle[0])), 0))
	report("chroot", unix.Chroot("/tmp"))
	report("pivot_root", unix.PivotRoot("/tmp", "/tmp"))
	report("init_module", raw(unix.SYS_INIT_MODULE, 0, 0, 0))
	report("kexec_load", raw(unix.SYS_KEXEC_LOAD, 0, 0, 0, 0))
	report("reboot", raw(unix.SYS_REBOOT, unix.LINUX_REBOOT_MAGIC1, unix.LINUX_REBOOT_MAGIC2, unix.LINUX_REBOOT_CMD_CAD_OFF))
	report("swapon", raw(unix.SYS_SWAPON, 0, 0))
	report("acct", raw(unix.SYS_ACCT, 0))
	ts := unix.Timespec{Sec: 1}
	report("clock_settime", raw(unix.SYS_CLOCK_SETTIME, unix.CLOCK_REALTIME, uintptr(unsafe.Pointer(&ts))))
	report("syslog", raw(unix.SYS_SYSLOG, 3, 0, 0))
	report("process_vm_readv", raw(unix.SYS_PROCESS_VM_READV, ppid, 0, 0, 0, 0, 0))
	report("fsopen", raw(unix.SYS_FSOPEN, uintptr(unsafe.Pointer(&[]byte("tmpfs\x00")[0])), 0))
	if os.Getuid() != 0 {
		report("setuid-0", raw(unix.SYS_SETUID, 0))
	}
	report("sethostname", unix.Sethostname([]byte("escaped")))
}

// sockets attempts raw and packet sockets and a netlink change of the
// namespace's own loopback.
func sockets() {
	try := func(name string, domain, typ, proto int) {
		fd, err := unix.Socket(domain, typ, proto)
		if err == nil {
			unix.Close(fd)
		}
		report(name, err)
	}
	try("raw-inet", unix.AF_INET, unix.SOCK_RAW, unix.IPPROTO_ICMP)
	try("raw-inet6", unix.AF_INET6, unix.SOCK_RAW, unix.IPPROTO_ICMPV6)
	try("raw-inet-tcp", unix.AF_INET, unix.SOCK_RAW, unix.IPPROTO_TCP)
	try("packet", unix.AF_PACKET, unix.SOCK_RAW, 0x0300)
	try("packet-dgram", unix.AF_PACKET, unix.SOCK_DGRAM, 0x0300)
	// Bringing lo down needs CAP_NET_ADMIN over the namespace.
	fd, err := unix.Socket(unix.AF_INET, unix.SOCK_DGRAM, 0)
	if err == nil {
		ifr, _ := unix.NewIfreq("lo")
		ifr.SetUint16(0)
		err = unix.IoctlIfreq(fd, unix.SIOCSIFFLAGS, ifr)
		unix.Close(fd)
	}
	report("lo-down", err)
}
