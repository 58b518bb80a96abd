// Package wipe puts a running container back as it was made, between two
// uses of it by untrusted code: its writable directories emptied and their
// inode flags, mode, owner and extended attributes restored, /dev and
// /dev/pts as made, the System V IPC objects of its IPC namespace removed
// (see Kept). Everything is reached through descriptors opened while the
// container was fresh, never through a path or pid its code could change.
// Removal holds one directory open at a time, however deep the tree a job
// left (removeAll). The reusable job sandboxes use it between jobs; their
// leftover processes are their cgroups' (runtime/cgroups).
package wipe

import (
	"bufio"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	goruntime "runtime"
	"strconv"
	"strings"
	"syscall"
	"unsafe"

	"golang.org/x/sys/unix"
)

// Kept is what a reusable sandbox's jobs can change and what is put back
// between two jobs, all reached through descriptors opened when the
// sandbox started (so never through a path a job could redirect, nor a
// pid that could be another process's by then):
//   - the directories given to Open (/work and /tmp in a job sandbox),
//     /dev/shm and /dev/mqueue are emptied and their own inode flags, mode,
//     owner and extended attributes restored;
//   - /dev gets back the entries it was made with and loses any other;
//   - /dev/pts and its ptmx get back their mode and owner (a job in a
//     user namespace owns them);
//   - the System V IPC objects of its IPC namespace are removed (POSIX
//     message queues are files in /dev/mqueue).
//
// Nothing of the job runs then: its processes were killed with its
// step's cgroup, and the sandbox's own process runs nothing between jobs.
type Kept struct {
	dirs []keptDir
	dev  keptDir
	ents map[string]devEntry // /dev as made
	pts  keptDir
	ptmx dirAttr  // of /dev/pts/ptmx
	ipc  *os.File // the sandbox's IPC namespace
	proc *os.Root // /proc/<pid> of the sandbox's process
}

type keptDir struct {
	name string // as the job sees it
	root *os.Root
	attr dirAttr
}

type dirAttr struct {
	mode     uint32
	uid, gid int
	flags    int // inode flags (FS_IOC_GETFLAGS) of a directory; -1: none
}

type devEntry struct {
	typ    fs.FileMode
	target string // of a symlink
}

// Dir is a directory of a container emptied between uses: Name as the
// container sees it, Path on the host ("": Name below the container's root).
type Dir struct{ Name, Path string }

// Open opens what is kept of the container whose process is host pid pid:
// its directories dirs, in that order, then /dev/shm, /dev/mqueue, /dev
// and /dev/pts, its IPC namespace and its /proc entry.
func Open(pid int, dirs ...Dir) (k *Kept, err error) {
	k = &Kept{ents: map[string]devEntry{}}
	defer func() {
		if err != nil {
			k.Close()
		}
	}()
	proc := "/proc/" + strconv.Itoa(pid)
	open := func(name, path string) (keptDir, error) {
		r, err := os.OpenRoot(path)
		if err != nil {
			return keptDir{}, fmt.Errorf("sandbox %s: %w", name, err)
		}
		d := keptDir{name: name, root: r}
		if d.attr, err = statDir(r); err != nil {
			r.Close()
			return keptDir{}, fmt.Errorf("sandbox %s: %w", name, err)
		}
		return d, nil
	}
	for _, d := range append(dirs, Dir{"/dev/shm", ""}, Dir{"/dev/mqueue", ""}) {
		if d.Path == "" {
			d.Path = proc + "/root" + d.Name
		}
		kd, err := open(d.Name, d.Path)
		if err != nil {
			return k, err
		}
		k.dirs = append(k.dirs, kd)
	}
	if k.dev, err = open("/dev", proc+"/root/dev"); err != nil {
		return k, err
	}
	if k.pts, err = open("/dev/pts", proc+"/root/dev/pts"); err != nil {
		return k, err
	}
	if k.ptmx, err = statAttr(k.pts.root, "ptmx"); err != nil {
		return k, fmt.Errorf("sandbox /dev/pts/ptmx: %w", err)
	}
	names, err := readNames(k.dev.root)
	if err != nil {
		return k, fmt.Errorf("sandbox /dev: %w", err)
	}
	for _, n := range names {
		fi, err := k.dev.root.Lstat(n)
		if err != nil {
			return k, fmt.Errorf("sandbox /dev/%s: %w", n, err)
		}
		e := devEntry{typ: fi.Mode().Type()}
		if e.typ == fs.ModeSymlink {
			if e.target, err = k.dev.root.Readlink(n); err != nil {
				return k, fmt.Errorf("sandbox /dev/%s: %w", n, err)
			}
		}
		k.ents[n] = e
	}
	if k.ipc, err = os.Open(proc + "/ns/ipc"); err != nil {
		return k, fmt.Errorf("sandbox IPC namespace: %w", err)
	}
	if k.proc, err = os.OpenRoot(proc); err != nil {
		return k, fmt.Errorf("sandbox process: %w", err)
	}
	return k, nil
}

// Close closes what k holds open.
func (k *Kept) Close() {
	for _, d := range append(k.dirs, k.dev, k.pts) {
		if d.root != nil {
			d.root.Close()
		}
	}
	if k.ipc != nil {
		k.ipc.Close()
	}
	if k.proc != nil {
		k.proc.Close()
	}
}

// Proc is the container process's /proc entry, opened with k: its
// network files are its network namespace's.
func (k *Kept) Proc() *os.Root { return k.proc }

// Wipe puts the sandbox back as it was made (see Kept).
func (k *Kept) Wipe() error { return k.WipeBut("") }

// WipeBut is Wipe but for the directory named keep (as the job sees it):
// between two steps of a job run in the sandbox, /work is kept and the
// rest emptied, as each step of the ordinary path gets its own /tmp,
// /dev and IPC namespace.
func (k *Kept) WipeBut(keep string) error {
	if err := clearIPC(k.ipc); err != nil {
		return fmt.Errorf("sandbox IPC objects: %w", err)
	}
	for _, d := range k.dirs {
		if d.name == keep {
			continue
		}
		if err := d.empty(nil); err != nil {
			return err
		}
	}
	if err := k.dev.empty(k.ents); err != nil {
		return err
	}
	if err := k.restorePts(); err != nil {
		return err
	}
	var missing []string
	for n, e := range k.ents {
		if e.typ != fs.ModeSymlink {
			continue // device files and mount points: a job cannot remove or change them
		}
		if t, err := k.dev.root.Readlink(n); err == nil && t == e.target {
			continue
		}
		if err := k.dev.removeAll(n); err != nil {
			return fmt.Errorf("sandbox /dev/%s: %w", n, err)
		}
		missing = append(missing, n)
	}
	if len(missing) == 0 {
		return nil
	}
	// Made as /dev's owner: a tmpfs mounted in a user namespace takes no
	// file owned by a host uid outside it.
	return asOwner(k.dev.attr, func() error {
		for _, n := range missing {
			if err := k.dev.root.Symlink(k.ents[n].target, n); err != nil {
				return fmt.Errorf("sandbox /dev/%s: %w", n, err)
			}
		}
		return nil
	})
}

// asOwner runs f on a thread whose file system uid and gid are a's owner's;
// the thread ends with it.
func asOwner(a dirAttr, f func() error) error {
	errc := make(chan error, 1)
	go func() {
		goruntime.LockOSThread() // never unlocked: the thread is dropped when this goroutine ends
		unix.Setfsgid(a.gid)
		unix.Setfsuid(a.uid)
		if uid, _ := unix.SetfsuidRetUid(-1); uid != a.uid {
			errc <- fmt.Errorf("file system uid %d, want %d", uid, a.uid)
			return
		}
		errc <- f()
	}()
	return <-errc
}

// empty removes every entry of the directory but those in keep (which
// stay as they are), then restores its mode and owner and removes its
// extended attributes.
func (d keptDir) empty(keep map[string]devEntry) error {
	f, err := d.root.Open(".")
	if err != nil {
		return fmt.Errorf("sandbox %s: %w", d.name, err)
	}
	defer f.Close()
	fd := int(f.Fd())
	for {
		sub, err := clearDir(f, keep)
		if err == nil && sub != "" {
			err = removeAll(fd, sub)
		}
		if err != nil {
			return fmt.Errorf("sandbox %s: %w", d.name, err)
		}
		if sub == "" {
			break
		}
		if _, err := f.Seek(0, io.SeekStart); err != nil {
			return fmt.Errorf("sandbox %s: %w", d.name, err)
		}
	}
	return d.restore(fd)
}

// restorePts puts back the mode and owner of /dev/pts and its ptmx.
func (k *Kept) restorePts() error {
	f, err := k.pts.root.Open(".")
	if err != nil {
		return fmt.Errorf("sandbox /dev/pts: %w", err)
	}
	defer f.Close()
	fd := int(f.Fd())
	if err := unix.Fchownat(fd, "ptmx", k.ptmx.uid, k.ptmx.gid, unix.AT_SYMLINK_NOFOLLOW); err != nil {
		return fmt.Errorf("sandbox /dev/pts/ptmx: %w", err)
	}
	if err := unix.Fchmodat(fd, "ptmx", k.ptmx.mode, 0); err != nil {
		return fmt.Errorf("sandbox /dev/pts/ptmx: %w", err)
	}
	return k.pts.restore(fd)
}

// restore puts back the inode flags, mode and owner of the directory, open
// as fd, and removes its extended attributes (ACLs too).
func (d keptDir) restore(fd int) error {
	if d.attr.flags >= 0 {
		// A job may set those its owner may (no atime, no dump).
		if err := unix.IoctlSetPointerInt(fd, unix.FS_IOC_SETFLAGS, d.attr.flags); err != nil {
			return fmt.Errorf("sandbox %s: inode flags: %w", d.name, err)
		}
	}
	if err := unix.Fchown(fd, d.attr.uid, d.attr.gid); err != nil {
		return fmt.Errorf("sandbox %s: %w", d.name, err)
	}
	if err := unix.Fchmod(fd, d.attr.mode); err != nil {
		return fmt.Errorf("sandbox %s: %w", d.name, err)
	}
	return removeXattrs(fd, d.name)
}

func removeXattrs(fd int, name string) error {
	buf := make([]byte, 4096)
	n, err := unix.Flistxattr(fd, buf)
	if errors.Is(err, unix.ERANGE) {
		if n, err = unix.Flistxattr(fd, nil); err == nil {
			buf = make([]byte, n)
			n, err = unix.Flistxattr(fd, buf)
		}
	}
	if errors.Is(err, unix.ENOTSUP) {
		return nil
	}
	if err != nil {
		return fmt.Errorf("sandbox %s: xattrs: %w", name, err)
	}
	for _, a := range strings.Split(string(buf[:n]), "\x00") {
		if a == "" {
			continue
		}
		if err := unix.Fremovexattr(fd, a); err != nil && !errors.Is(err, unix.ENODATA) {
			return fmt.Errorf("sandbox %s: xattr %s: %w", name, a, err)
		}
	}
	return nil
}

func readNames(r *os.Root) ([]string, error) {
	f, err := r.Open(".")
	if err != nil {
		return nil, err
	}
	defer f.Close()
	return f.Readdirnames(-1)
}

func statDir(r *os.Root) (dirAttr, error) {
	a, err := statAttr(r, ".")
	if err != nil {
		return a, err
	}
	f, err := r.Open(".")
	if err != nil {
		return a, err
	}
	defer f.Close()
	flags, err := unix.IoctlGetInt(int(f.Fd()), unix.FS_IOC_GETFLAGS)
	if errors.Is(err, unix.ENOTTY) || errors.Is(err, unix.EOPNOTSUPP) {
		return a, nil // a file system without inode flags (mqueue)
	}
	a.flags = flags
	return a, err
}

func statAttr(r *os.Root, name string) (dirAttr, error) {
	fi, err := r.Lstat(name)
	if err != nil {
		return dirAttr{}, err
	}
	st, ok := fi.Sys().(*syscall.Stat_t)
	if !ok {
		return dirAttr{}, errors.New("no stat")
	}
	return dirAttr{mode: st.Mode & 0o7777, uid: int(st.Uid), gid: int(st.Gid), flags: -1}, nil
}

// clearIPC removes every System V message queue, semaphore set and shared
// memory segment of the IPC namespace ns, from a thread that enters it and
// ends with the goroutine.
func clearIPC(ns *os.File) error {
	errc := make(chan error, 1)
	fd := int(ns.Fd())
	go func() {
		goruntime.LockOSThread()
		if err := unix.Setns(fd, unix.CLONE_NEWIPC); err != nil {
			errc <- fmt.Errorf("enter: %w", err)
			return // the thread, maybe half changed, ends with the goroutine
		}
		err := removeIPC()
		// Back to the daemon's own namespace, the thread serves other
		// goroutines again; if that fails it ends with this one.
		if back := unix.Setns(daemonIPC.fd, unix.CLONE_NEWIPC); daemonIPC.err == nil && back == nil {
			goruntime.UnlockOSThread()
		}
		errc <- err
	}()
	return <-errc
}

// daemonIPC is the daemon's own IPC namespace, which a thread that
// entered a sandbox's goes back to (an fd open for the daemon's life).
var daemonIPC = func() (d struct {
	fd  int
	err error
}) {
	d.fd, d.err = unix.Open("/proc/self/ns/ipc", unix.O_RDONLY|unix.O_CLOEXEC, 0)
	return d
}()

func removeIPC() error {
	if ipcEmpty() {
		return nil
	}
	kinds := []struct {
		file string
		rm   func(id uintptr) syscall.Errno
	}{
		{"/proc/sysvipc/msg", func(id uintptr) syscall.Errno {
			_, _, e := unix.Syscall(unix.SYS_MSGCTL, id, unix.IPC_RMID, 0)
			return e
		}},
		{"/proc/sysvipc/sem", func(id uintptr) syscall.Errno {
			_, _, e := unix.Syscall6(unix.SYS_SEMCTL, id, 0, unix.IPC_RMID, 0, 0, 0)
			return e
		}},
		{"/proc/sysvipc/shm", func(id uintptr) syscall.Errno {
			_, _, e := unix.Syscall(unix.SYS_SHMCTL, id, unix.IPC_RMID, 0)
			return e
		}},
	}
	for _, k := range kinds {
		ids, err := ipcIDs(k.file)
		if err != nil {
			return err
		}
		for _, id := range ids {
			if e := k.rm(uintptr(id)); e != 0 && e != unix.EINVAL && e != unix.EIDRM {
				return fmt.Errorf("%s %d: %w", k.file, id, e)
			}
		}
	}
	return nil
}

// The Linux commands of msgctl, semctl and shmctl that give a namespace's
// counts.
const (
	ipcMsgInfo = 12
	ipcSemInfo = 19
	ipcShmInfo = 14
)

// ipcEmpty says whether the calling thread's IPC namespace holds no
// System V message queue, semaphore set or shared memory segment, from
// the kernel's counts (no /proc file read): the common case after a job.
func ipcEmpty() bool {
	var msg [8]int32 // struct msginfo: with MSG_INFO, msgpool ([0]) counts the queues
	if _, _, e := unix.Syscall(unix.SYS_MSGCTL, 0, ipcMsgInfo, uintptr(unsafe.Pointer(&msg[0]))); e != 0 || msg[0] != 0 {
		return false
	}
	var sem [10]int32 // struct seminfo: with SEM_INFO, semusz ([7]) counts the sets
	if _, _, e := unix.Syscall6(unix.SYS_SEMCTL, 0, 0, ipcSemInfo, uintptr(unsafe.Pointer(&sem[0])), 0, 0); e != 0 || sem[7] != 0 {
		return false
	}
	var shm struct { // struct shm_info
		usedIDs int32 // the segments
		_       int32
		_       [5]uint64
	}
	if _, _, e := unix.Syscall(unix.SYS_SHMCTL, 0, ipcShmInfo, uintptr(unsafe.Pointer(&shm))); e != 0 || shm.usedIDs != 0 {
		return false
	}
	return true
}

// ipcIDs reads the ids (second column) of a /proc/sysvipc file.
func ipcIDs(file string) ([]int, error) {
	f, err := os.Open(file)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	var ids []int
	sc := bufio.NewScanner(f)
	sc.Scan() // the header
	for sc.Scan() {
		fields := strings.Fields(sc.Text())
		if len(fields) < 2 {
			continue
		}
		if id, err := strconv.Atoi(fields[1]); err == nil {
			ids = append(ids, id)
		}
	}
	return ids, sc.Err()
}
