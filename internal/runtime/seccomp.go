package runtime

import (
	goruntime "runtime"

	"github.com/opencontainers/runtime-spec/specs-go"
	"golang.org/x/sys/unix"
)

// allowedSyscalls are the system calls an ordinary program needs. Everything
// else fails with EPERM: namespaces (unshare, setns), mounts, keyrings,
// ptrace, module loading, kexec, bpf, perf, swap, reboot, clock setting and the
// like. Names unknown to the host's libseccomp are ignored by the runtime.
var allowedSyscalls = []string{
	"accept", "accept4", "access", "adjtimex", "alarm", "arch_prctl", "bind", "brk",
	"cachestat", "capget", "capset", "chdir", "chmod", "chown", "chown32",
	"clock_adjtime", "clock_adjtime64", "clock_getres", "clock_getres_time64",
	"clock_gettime", "clock_gettime64", "clock_nanosleep", "clock_nanosleep_time64",
	"close", "close_range", "connect", "copy_file_range", "creat", "dup", "dup2", "dup3",
	"epoll_create", "epoll_create1", "epoll_ctl", "epoll_ctl_old", "epoll_pwait",
	"epoll_pwait2", "epoll_wait", "epoll_wait_old", "eventfd", "eventfd2", "execve",
	"execveat", "exit", "exit_group", "faccessat", "faccessat2", "fadvise64",
	"fadvise64_64", "fallocate", "fanotify_mark", "fchdir", "fchmod", "fchmodat",
	"fchmodat2", "fchown", "fchown32", "fchownat", "fcntl", "fcntl64", "fdatasync",
	"fgetxattr", "flistxattr", "flock", "fork", "fremovexattr", "fsetxattr", "fstat",
	"fstat64", "fstatat64", "fstatfs", "fstatfs64", "fsync", "ftruncate", "ftruncate64",
	"futex", "futex_requeue", "futex_time64", "futex_wait", "futex_waitv", "futex_wake",
	"futimesat", "get_mempolicy", "get_robust_list", "get_thread_area", "getcpu",
	"getcwd", "getdents", "getdents64", "getegid", "getegid32", "geteuid", "geteuid32",
	"getgid", "getgid32", "getgroups", "getgroups32", "getitimer", "getpeername",
	"getpgid", "getpgrp", "getpid", "getppid", "getpriority", "getrandom", "getresgid",
	"getresgid32", "getresuid", "getresuid32", "getrlimit", "getrusage", "getsid",
	"getsockname", "getsockopt", "gettid", "gettimeofday", "getuid", "getuid32",
	"getxattr", "inotify_add_watch", "inotify_init", "inotify_init1", "inotify_rm_watch",
	"io_cancel", "io_destroy", "io_getevents", "io_pgetevents", "io_pgetevents_time64",
	"io_setup", "io_submit", "ioctl", "ioprio_get", "ioprio_set", "ipc", "kill",
	"landlock_add_rule", "landlock_create_ruleset", "landlock_restrict_self", "lchown",
	"lchown32", "lgetxattr", "link", "linkat", "listen", "listxattr", "llistxattr",
	"lremovexattr", "lseek", "lsetxattr", "lstat", "lstat64", "madvise", "map_shadow_stack",
	"membarrier", "memfd_create", "memfd_secret", "mincore", "mkdir", "mkdirat", "mknod",
	"mknodat", "mlock", "mlock2", "mlockall", "mmap", "mmap2", "mprotect", "mq_getsetattr",
	"mq_notify", "mq_open", "mq_timedreceive", "mq_timedreceive_time64", "mq_timedsend",
	"mq_timedsend_time64", "mq_unlink", "mremap", "msgctl", "msgget", "msgrcv", "msgsnd",
	"msync", "munlock", "munlockall", "munmap", "name_to_handle_at", "nanosleep",
	"newfstatat", "open", "openat", "openat2", "pause", "pidfd_getfd", "pidfd_open",
	"pidfd_send_signal", "pipe", "pipe2", "pkey_alloc", "pkey_free", "pkey_mprotect",
	"poll", "ppoll", "ppoll_time64", "prctl", "pread64", "preadv", "preadv2", "prlimit64",
	"process_mrelease", "pselect6", "pselect6_time64", "pwrite64", "pwritev", "pwritev2",
	"read", "readahead", "readlink", "readlinkat", "readv", "recv", "recvfrom", "recvmmsg",
	"recvmmsg_time64", "recvmsg", "remap_file_pages", "removexattr", "rename", "renameat",
	"renameat2", "restart_syscall", "rmdir", "rseq", "rt_sigaction", "rt_sigpending",
	"rt_sigprocmask", "rt_sigqueueinfo", "rt_sigreturn", "rt_sigsuspend",
	"rt_sigtimedwait", "rt_sigtimedwait_time64", "rt_tgsigqueueinfo", "sched_get_priority_max",
	"sched_get_priority_min", "sched_getaffinity", "sched_getattr", "sched_getparam",
	"sched_getscheduler", "sched_rr_get_interval", "sched_rr_get_interval_time64",
	"sched_setaffinity", "sched_setattr", "sched_setparam", "sched_setscheduler",
	"sched_yield", "seccomp", "select", "semctl", "semget", "semop", "semtimedop",
	"semtimedop_time64", "send", "sendfile", "sendfile64", "sendmmsg", "sendmsg", "sendto",
	"set_mempolicy", "set_robust_list", "set_thread_area", "set_tid_address", "setfsgid",
	"setfsgid32", "setfsuid", "setfsuid32", "setgid", "setgid32", "setgroups",
	"setgroups32", "setitimer", "setpgid", "setpriority", "setregid", "setregid32",
	"setresgid", "setresgid32", "setresuid", "setresuid32", "setreuid", "setreuid32",
	"setrlimit", "setsid", "setsockopt", "setuid", "setuid32", "setxattr", "shmat", "shmctl",
	"shmdt", "shmget", "shutdown", "sigaltstack", "signalfd", "signalfd4", "sigprocmask",
	"sigreturn", "socket", "socketcall", "socketpair", "splice", "stat", "stat64", "statfs",
	"statfs64", "statx", "symlink", "symlinkat", "sync", "sync_file_range", "syncfs",
	"sysinfo", "tee", "tgkill", "time", "timer_create", "timer_delete", "timer_getoverrun",
	"timer_gettime", "timer_gettime64", "timer_settime", "timer_settime64",
	"timerfd_create", "timerfd_gettime", "timerfd_gettime64", "timerfd_settime",
	"timerfd_settime64", "times", "tkill", "truncate", "truncate64", "ugetrlimit", "umask",
	"uname", "unlink", "unlinkat", "utime", "utimensat", "utimensat_time64", "utimes",
	"vfork", "vmsplice", "wait4", "waitid", "waitpid", "write", "writev",
	// Needed by runc itself between applying the filter and exec.
	"chroot",
}

// namespaceFlags are the clone flags that create namespaces.
const namespaceFlags = unix.CLONE_NEWNS | unix.CLONE_NEWUTS | unix.CLONE_NEWIPC |
	unix.CLONE_NEWUSER | unix.CLONE_NEWPID | unix.CLONE_NEWNET | unix.CLONE_NEWCGROUP |
	unix.CLONE_NEWTIME

// DefaultSeccomp returns shoal's default seccomp profile: deny by default with
// EPERM, allow allowedSyscalls, allow clone only without namespace flags, and
// answer clone3 with ENOSYS so that libc falls back to clone (whose flags a
// filter can see).
func DefaultSeccomp() *specs.LinuxSeccomp {
	eperm := uint(unix.EPERM)
	enosys := uint(unix.ENOSYS)
	cloneArg := 0
	if goruntime.GOARCH == "s390x" {
		cloneArg = 1
	}
	return &specs.LinuxSeccomp{
		DefaultAction:   specs.ActErrno,
		DefaultErrnoRet: &eperm,
		Architectures:   seccompArches(),
		Syscalls: []specs.LinuxSyscall{
			{Names: append([]string(nil), allowedSyscalls...), Action: specs.ActAllow},
			{Names: []string{"clone"}, Action: specs.ActAllow, Args: []specs.LinuxSeccompArg{
				{Index: uint(cloneArg), Value: namespaceFlags, ValueTwo: 0, Op: specs.OpMaskedEqual},
			}},
			{Names: []string{"clone3"}, Action: specs.ActErrno, ErrnoRet: &enosys},
			// personality(0xffffffff) queries; PER_LINUX and PER_LINUX32 are safe.
			{Names: []string{"personality"}, Action: specs.ActAllow, Args: []specs.LinuxSeccompArg{{Index: 0, Value: 0, Op: specs.OpEqualTo}}},
			{Names: []string{"personality"}, Action: specs.ActAllow, Args: []specs.LinuxSeccompArg{{Index: 0, Value: 8, Op: specs.OpEqualTo}}},
			{Names: []string{"personality"}, Action: specs.ActAllow, Args: []specs.LinuxSeccompArg{{Index: 0, Value: 0xffffffff, Op: specs.OpEqualTo}}},
		},
	}
}

// seccompArches is the native architecture only: other ABIs (32-bit x86 on
// amd64, arm on arm64) are refused outright, and the filter compiles in a
// third of the time that three architectures take, which is most of the cost
// of a container start.
func seccompArches() []specs.Arch {
	switch goruntime.GOARCH {
	case "amd64":
		return []specs.Arch{specs.ArchX86_64}
	case "arm64":
		return []specs.Arch{specs.ArchAARCH64}
	case "386":
		return []specs.Arch{specs.ArchX86}
	case "ppc64le":
		return []specs.Arch{specs.ArchPPC64LE}
	case "s390x":
		return []specs.Arch{specs.ArchS390X}
	case "riscv64":
		return []specs.Arch{specs.ArchRISCV64}
	}
	return nil
}
