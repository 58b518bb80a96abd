package runtime

import (
	"fmt"
	"io"
	"math"
	"os"
	"path"
	"regexp"
	"strings"
	"syscall"

	"github.com/opencontainers/runtime-spec/specs-go"

	"github.com/shoal-run/shoal/internal/errdefs"
	"github.com/shoal-run/shoal/internal/runtime/disk"
)

// Spec describes one container to create.
type Spec struct {
	ID string
	// Layers are image snapshot directories, bottom first, in overlayfs
	// whiteout format. They become the overlay's lower directories; each
	// container gets its own upper and work directories under its bundle.
	Layers []string
	// ReadOnlyRootfs makes the root filesystem read-only.
	ReadOnlyRootfs bool
	Args           []string
	Env            []string
	// Cwd defaults to "/".
	Cwd string
	// User is "uid[:gid]" or a user name (optionally "name:group") looked up
	// in the rootfs /etc/passwd and /etc/group. Empty means root.
	User     string
	Hostname string
	Limits   Limits
	// NetNSPath is a network namespace to join; "" gives the container a new,
	// empty network namespace.
	NetNSPath string
	Mounts    []Mount
	// Stdin, Stdout and Stderr are the container's stdio; nil means
	// /dev/null. An *os.File is handed to the runtime as is; another
	// io.Reader for Stdin is copied through a pipe.
	Stdin  io.Reader
	Stdout *os.File
	Stderr *os.File
	Labels map[string]string
	// Ephemeral containers are never written to the record store: they cost
	// no store writes on the start and delete paths, and a restarted daemon
	// removes them as orphans instead of adopting them. For one-off runs
	// whose client is gone when the daemon is.
	Ephemeral bool
	// StopSignal is what Stop sends first (0: SIGTERM).
	StopSignal syscall.Signal
	// Rlimits replace the default limit of the same type. A hard limit above
	// the host's own is refused.
	Rlimits []specs.POSIXRlimit
	// Capabilities, if not nil, replace the default set (names with or
	// without the CAP_ prefix).
	Capabilities []string
	// Seccomp, if not nil, replaces the default allowlist.
	Seccomp *specs.LinuxSeccomp
	// UserNS, if not nil, runs the container in a new user namespace (see
	// UserNS).
	UserNS *UserNS
	// Checkpointable makes the container one Checkpoint can dump (see
	// checkpoint.go): stdin, when nil, is an empty pipe rather than
	// /dev/null, and CRIU reads shoal's configuration. Stdout and Stderr
	// must then be pipes or nil.
	Checkpointable bool
	// RestoreFrom, when set, is a checkpoint's directory (Checkpoint's):
	// Run restores the container's processes from it (`runc restore`)
	// instead of starting Args (the spec still needs them, the same as the
	// dumped container's). Implies Checkpointable.
	RestoreFrom string
	// DiskBytes, when not 0, gives the writable layer (the overlay's upper
	// and work directories) an ext4 file system of its own of this size
	// (package disk), so that writes past it fail with ENOSPC; 0 keeps them
	// in the bundle, on the file system of the Runtime's Root.
	DiskBytes int64
}

// Limits are the container's cgroup limits; zero means unlimited.
type Limits struct {
	// CPUs is a quota in cores over a 100ms period: 0 (none) or
	// MinCPUs..MaxCPUs.
	CPUs float64
	// CPUShares is the relative CPU weight: 0 (default) or 2..262144, as
	// cpu.shares on cgroup v1; the runtime converts it to cpu.weight on v2.
	CPUShares uint64
	// CPUSet pins the container to these CPUs, in the kernel's list format
	// ("3", "0-1,4"); "" runs it on any. Only where CPUSetSupported.
	CPUSet string
	// MemoryBytes limits memory; swap is limited to the same value, so the
	// container cannot swap.
	MemoryBytes int64
	Pids        int64
	// OOMScoreAdj is the container processes' oom_score_adj (nil: inherit).
	OOMScoreAdj *int
}

// Mount is an extra mount in the container.
type Mount struct {
	Source      string
	Destination string
	ReadOnly    bool
	// Type is "bind" (default) or "tmpfs".
	Type    string
	Options []string
	// SizeBytes limits a tmpfs.
	SizeBytes int64
}

var knownCaps = map[string]bool{}

func init() {
	for _, c := range []string{"CHOWN", "DAC_OVERRIDE", "DAC_READ_SEARCH", "FOWNER", "FSETID", "KILL",
		"SETGID", "SETUID", "SETPCAP", "LINUX_IMMUTABLE", "NET_BIND_SERVICE", "NET_BROADCAST",
		"NET_ADMIN", "NET_RAW", "IPC_LOCK", "IPC_OWNER", "SYS_MODULE", "SYS_RAWIO", "SYS_CHROOT",
		"SYS_PTRACE", "SYS_PACCT", "SYS_ADMIN", "SYS_BOOT", "SYS_NICE", "SYS_RESOURCE", "SYS_TIME",
		"SYS_TTY_CONFIG", "MKNOD", "LEASE", "AUDIT_WRITE", "AUDIT_CONTROL", "SETFCAP", "MAC_OVERRIDE",
		"MAC_ADMIN", "SYSLOG", "WAKE_ALARM", "BLOCK_SUSPEND", "AUDIT_READ", "PERFMON", "BPF",
		"CHECKPOINT_RESTORE"} {
		knownCaps["CAP_"+c] = true
	}
}

// validate checks the parts of a Spec that need no filesystem access.
func (s *Spec) validate() error {
	if err := validID(s.ID); err != nil {
		return err
	}
	if len(s.Layers) == 0 {
		return errdefs.Invalid("layers", "at least one layer is needed")
	}
	for i, l := range s.Layers {
		if !path.IsAbs(l) {
			return errdefs.Invalid(fmt.Sprintf("layers[%d]", i), "%q is not an absolute path", l)
		}
		if strings.ContainsAny(l, ",:") {
			return errdefs.Invalid(fmt.Sprintf("layers[%d]", i), "%q contains ',' or ':', which overlayfs cannot take", l)
		}
		if fi, err := os.Stat(l); err != nil || !fi.IsDir() {
			return errdefs.Invalid(fmt.Sprintf("layers[%d]", i), "%q is not a directory", l)
		}
	}
	if len(s.Args) == 0 {
		return errdefs.Invalid("args", "a command is needed")
	}
	if s.DiskBytes != 0 && s.DiskBytes < disk.MinSize {
		return errdefs.Invalid("disk", "%d bytes is below the minimum of %d", s.DiskBytes, disk.MinSize)
	}
	if s.Cwd != "" && !path.IsAbs(s.Cwd) {
		return errdefs.Invalid("cwd", "%q is not an absolute path", s.Cwd)
	}
	for i, e := range s.Env {
		if !strings.Contains(e, "=") || strings.HasPrefix(e, "=") {
			return errdefs.Invalid(fmt.Sprintf("env[%d]", i), "%q is not NAME=value", e)
		}
	}
	l := s.Limits
	if err := validCPUs("limits.cpus", l.CPUs); err != nil {
		return err
	}
	if l.CPUShares != 0 && (l.CPUShares < minCPUShares || l.CPUShares > maxCPUShares) {
		return errdefs.Invalid("limits.cpu_shares", "%d is neither 0 (default) nor within %d..%d", l.CPUShares, minCPUShares, maxCPUShares)
	}
	if l.CPUSet != "" && !cpuList.MatchString(l.CPUSet) {
		return errdefs.Invalid("limits.cpuset", "%q is not a CPU list such as 0-1,3", l.CPUSet)
	}
	if l.MemoryBytes < 0 {
		return errdefs.Invalid("limits.memory", "%d is negative", l.MemoryBytes)
	}
	if l.Pids < 0 {
		return errdefs.Invalid("limits.pids", "%d is negative", l.Pids)
	}
	if l.MemoryBytes > 0 && l.MemoryBytes < 4<<20 {
		return errdefs.Invalid("limits.memory", "%d bytes is below the minimum of 4MiB", l.MemoryBytes)
	}
	if l.OOMScoreAdj != nil && (*l.OOMScoreAdj < -1000 || *l.OOMScoreAdj > 1000) {
		return errdefs.Invalid("limits.oom_score_adj", "%d is outside -1000..1000", *l.OOMScoreAdj)
	}
	for i, m := range s.Mounts {
		f := fmt.Sprintf("mounts[%d]", i)
		if !path.IsAbs(m.Destination) || path.Clean(m.Destination) == "/" {
			return errdefs.Invalid(f+".destination", "%q is not an absolute path below /", m.Destination)
		}
		switch m.Type {
		case "", "bind":
			if !path.IsAbs(m.Source) {
				return errdefs.Invalid(f+".source", "%q is not an absolute path", m.Source)
			}
			if _, err := os.Stat(m.Source); err != nil {
				return errdefs.Invalid(f+".source", "%v", err)
			}
		case "tmpfs":
		default:
			return errdefs.Invalid(f+".type", "%q is neither bind nor tmpfs", m.Type)
		}
	}
	for _, c := range s.Capabilities {
		if !knownCaps[capName(c)] {
			return errdefs.Invalid("capabilities", "unknown capability %q", c)
		}
	}
	return nil
}

var cpuList = regexp.MustCompile(`^[0-9]{1,5}(-[0-9]{1,5})?(,[0-9]{1,5}(-[0-9]{1,5})?)*$`)

// CPU limits. A quota needs at least 1ms per 100ms period; MaxCPUs keeps
// quotas far from overflowing and above any real machine's core count.
const (
	MinCPUs = 0.01
	MaxCPUs = 1024
	// cpu.shares bounds of the kernel (cgroup v1); runc maps them onto
	// cpu.weight on v2.
	minCPUShares = 2
	maxCPUShares = 262144
)

// validCPUs checks a CPU quota in cores: 0 (no limit) or MinCPUs..MaxCPUs.
func validCPUs(field string, cpus float64) error {
	switch {
	case math.IsNaN(cpus) || math.IsInf(cpus, 0):
		return errdefs.Invalid(field, "%g is not a number of cores", cpus)
	case cpus < 0:
		return errdefs.Invalid(field, "%g is negative", cpus)
	case cpus > 0 && cpus < MinCPUs:
		return errdefs.Invalid(field, "%g is below the minimum of %g", cpus, MinCPUs)
	case cpus > MaxCPUs:
		return errdefs.Invalid(field, "%g is above the maximum of %d", cpus, MaxCPUs)
	}
	return nil
}

func validID(id string) error {
	if id == "" || len(id) > 128 {
		return errdefs.Invalid("id", "must be 1 to 128 characters")
	}
	for i, c := range id {
		ok := c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || (i > 0 && (c == '-' || c == '_' || c == '.'))
		if !ok {
			return errdefs.Invalid("id", "%q: only letters, digits and -_. (not first) are allowed", id)
		}
	}
	return nil
}

func capName(c string) string {
	c = strings.ToUpper(c)
	if !strings.HasPrefix(c, "CAP_") {
		c = "CAP_" + c
	}
	return c
}
