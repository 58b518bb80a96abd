package runtime

import (
	"fmt"
	"sort"
	"strconv"
	"strings"

	"github.com/opencontainers/runtime-spec/specs-go"

	"github.com/shoal-run/shoal/internal/errdefs"
)

// hostInfo is what the generated spec depends on besides the Spec itself,
// kept apart so that golden tests are the same on every host.
type hostInfo struct {
	// rlimitHard maps rlimit type to the host's hard limit.
	rlimitHard map[string]uint64
	cgroupNS   bool
	cgroupV2   bool
	// cgroupParent is the cgroup under which every container's cgroup is
	// made ("/shoal" unless Options.CgroupParent says otherwise).
	cgroupParent string
}

// user is a resolved process identity.
type user struct {
	UID, GID uint32
	Groups   []uint32
	Home     string
}

const defaultPath = "PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"

// defaultCaps is Docker's default set without NET_RAW.
var defaultCaps = []string{
	"CAP_CHOWN", "CAP_DAC_OVERRIDE", "CAP_FSETID", "CAP_FOWNER", "CAP_MKNOD",
	"CAP_SETGID", "CAP_SETUID", "CAP_SETFCAP", "CAP_SETPCAP",
	"CAP_NET_BIND_SERVICE", "CAP_SYS_CHROOT", "CAP_KILL", "CAP_AUDIT_WRITE",
}

// defaultRlimits are raised no higher than the host allows.
var defaultRlimits = []specs.POSIXRlimit{
	{Type: "RLIMIT_NOFILE", Soft: 1048576, Hard: 1048576},
}

// maskedPaths are hidden in every container: what tells of the host's
// kernel memory layout and hardware (slabinfo, vmallocinfo, iomem,
// kallsyms, the page tables' kpage* files) or its other tenants.
var maskedPaths = []string{
	"/proc/acpi", "/proc/asound", "/proc/buddyinfo", "/proc/interrupts", "/proc/iomem",
	"/proc/ioports", "/proc/kallsyms", "/proc/kcore", "/proc/keys", "/proc/kmsg",
	"/proc/kpagecgroup", "/proc/kpagecount", "/proc/kpageflags", "/proc/latency_stats",
	"/proc/modules", "/proc/pagetypeinfo", "/proc/sched_debug", "/proc/scsi", "/proc/slabinfo",
	"/proc/timer_list", "/proc/timer_stats", "/proc/vmallocinfo", "/proc/zoneinfo",
	"/sys/devices/virtual/powercap", "/sys/firmware",
}

var readonlyPaths = []string{
	"/proc/bus", "/proc/fs", "/proc/irq", "/proc/sys", "/proc/sysrq-trigger",
}

// cgroupsPath is where shoal puts a container in every hierarchy.
func cgroupsPath(id string) string { return DefaultCgroupParent + "/" + id }

// cgroupsPath is the cgroup of container id under this host's parent.
func (h hostInfo) cgroupsPath(id string) string {
	if h.cgroupParent == "" {
		return cgroupsPath(id)
	}
	return h.cgroupParent + "/" + id
}

// generate builds the OCI runtime spec for s.
func generate(s *Spec, u user, h hostInfo) (*specs.Spec, error) {
	env := append([]string(nil), s.Env...)
	if !hasEnv(env, "PATH") {
		env = append([]string{defaultPath}, env...)
	}
	if !hasEnv(env, "HOME") {
		home := u.Home
		if home == "" {
			home = "/"
		}
		env = append(env, "HOME="+home)
	}
	caps := defaultCaps
	if s.Capabilities != nil {
		caps = make([]string, 0, len(s.Capabilities))
		for _, c := range s.Capabilities {
			caps = append(caps, capName(c))
		}
	}
	rl, err := rlimits(s.Rlimits, h.rlimitHard)
	if err != nil {
		return nil, err
	}
	cwd := s.Cwd
	if cwd == "" {
		cwd = "/"
	}
	hostname := s.Hostname
	if hostname == "" {
		hostname = s.ID
		if len(hostname) > 63 {
			hostname = hostname[:63]
		}
	}
	seccomp := s.Seccomp
	if seccomp == nil {
		seccomp = DefaultSeccomp()
	}
	spec := &specs.Spec{
		Version: "1.0.2",
		Process: &specs.Process{
			Args: s.Args,
			Env:  env,
			Cwd:  cwd,
			User: specs.User{UID: u.UID, GID: u.GID, AdditionalGids: u.Groups},
			Capabilities: &specs.LinuxCapabilities{
				Bounding: caps, Effective: caps, Permitted: caps,
			},
			Rlimits:         rl,
			NoNewPrivileges: true,
			OOMScoreAdj:     s.Limits.OOMScoreAdj,
		},
		Root:     &specs.Root{Path: "rootfs", Readonly: s.ReadOnlyRootfs},
		Hostname: hostname,
		Mounts:   mounts(s.Mounts, h),
		Linux: &specs.Linux{
			Resources:     resources(s.Limits),
			CgroupsPath:   h.cgroupsPath(s.ID),
			Namespaces:    namespaces(s.NetNSPath, h),
			MaskedPaths:   maskedPaths,
			ReadonlyPaths: readonlyPaths,
			Seccomp:       seccomp,
		},
	}
	applyUserNS(spec, s)
	return spec, nil
}

func hasEnv(env []string, name string) bool {
	for _, e := range env {
		if strings.HasPrefix(e, name+"=") {
			return true
		}
	}
	return false
}

func rlimits(req []specs.POSIXRlimit, hostHard map[string]uint64) ([]specs.POSIXRlimit, error) {
	byType := map[string]specs.POSIXRlimit{}
	for _, r := range defaultRlimits {
		if hard, ok := hostHard[r.Type]; ok {
			r.Hard = min(r.Hard, hard)
			r.Soft = min(r.Soft, r.Hard)
		}
		byType[r.Type] = r
	}
	for i, r := range req {
		f := fmt.Sprintf("rlimits[%d]", i)
		if _, ok := rlimitResources[r.Type]; !ok {
			return nil, errdefs.Invalid(f+".type", "unknown rlimit %q", r.Type)
		}
		if r.Soft > r.Hard {
			return nil, errdefs.Invalid(f, "%s soft limit %d is above hard limit %d", r.Type, r.Soft, r.Hard)
		}
		if hard, ok := hostHard[r.Type]; ok && r.Hard > hard {
			return nil, errdefs.Invalid(f, "%s hard limit %d is above the host's %d", r.Type, r.Hard, hard)
		}
		byType[r.Type] = r
	}
	out := make([]specs.POSIXRlimit, 0, len(byType))
	for _, r := range byType {
		out = append(out, r)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Type < out[j].Type })
	return out, nil
}

func resources(l Limits) *specs.LinuxResources {
	r := &specs.LinuxResources{
		Devices: []specs.LinuxDeviceCgroup{{Allow: false, Access: "rwm"}},
	}
	if l.MemoryBytes > 0 {
		m, sw := l.MemoryBytes, l.MemoryBytes
		r.Memory = &specs.LinuxMemory{Limit: &m, Swap: &sw}
	}
	if l.CPUs > 0 || l.CPUShares > 0 || l.CPUSet != "" {
		r.CPU = &specs.LinuxCPU{Cpus: l.CPUSet}
		if l.CPUShares > 0 {
			sh := l.CPUShares
			r.CPU.Shares = &sh
		}
		if l.CPUs > 0 {
			period := uint64(100000)
			quota := int64(l.CPUs*float64(period) + 0.5)
			r.CPU.Period, r.CPU.Quota = &period, &quota
		}
	}
	if l.Pids > 0 {
		p := l.Pids
		r.Pids = &specs.LinuxPids{Limit: &p}
	}
	return r
}

func namespaces(netns string, h hostInfo) []specs.LinuxNamespace {
	ns := []specs.LinuxNamespace{
		{Type: specs.PIDNamespace}, {Type: specs.IPCNamespace}, {Type: specs.UTSNamespace},
		{Type: specs.MountNamespace}, {Type: specs.NetworkNamespace, Path: netns},
	}
	if h.cgroupNS {
		ns = append(ns, specs.LinuxNamespace{Type: specs.CgroupNamespace})
	}
	return ns
}

// mounts lists the container's mounts: the usual /proc, /dev and /sys, then
// extra. The tmpfs at /dev and /dev/shm are capped in size and in inodes
// (one per 4 KiB), so that a flood of empty files cannot grow the
// kernel's inode memory past what their size allows.
func mounts(extra []Mount, h hostInfo) []specs.Mount {
	ms := []specs.Mount{
		{Destination: "/proc", Type: "proc", Source: "proc", Options: []string{"nosuid", "noexec", "nodev"}},
		{Destination: "/dev", Type: "tmpfs", Source: "tmpfs", Options: []string{"nosuid", "strictatime", "mode=755", "size=65536k", "nr_inodes=16384"}},
		{Destination: "/dev/pts", Type: "devpts", Source: "devpts", Options: []string{"nosuid", "noexec", "newinstance", "ptmxmode=0666", "mode=0620", "gid=5"}},
		{Destination: "/dev/shm", Type: "tmpfs", Source: "shm", Options: []string{"nosuid", "noexec", "nodev", "mode=1777", "size=65536k", "nr_inodes=16384"}},
		{Destination: "/dev/mqueue", Type: "mqueue", Source: "mqueue", Options: []string{"nosuid", "noexec", "nodev"}},
		{Destination: "/sys", Type: "sysfs", Source: "sysfs", Options: []string{"nosuid", "noexec", "nodev", "ro"}},
	}
	if h.cgroupV2 {
		ms = append(ms, specs.Mount{Destination: "/sys/fs/cgroup", Type: "cgroup", Source: "cgroup",
			Options: []string{"nosuid", "noexec", "nodev", "relatime", "ro"}})
	}
	for _, m := range extra {
		switch m.Type {
		case "tmpfs":
			opts := []string{"nosuid", "nodev"}
			if m.SizeBytes > 0 {
				opts = append(opts, "size="+strconv.FormatInt(m.SizeBytes, 10))
			}
			if m.ReadOnly {
				opts = append(opts, "ro")
			}
			ms = append(ms, specs.Mount{Destination: m.Destination, Type: "tmpfs", Source: "tmpfs",
				Options: append(opts, m.Options...)})
		default:
			opts := []string{"rbind"}
			if m.ReadOnly {
				opts = append(opts, "ro")
			}
			ms = append(ms, specs.Mount{Destination: m.Destination, Type: "bind", Source: m.Source,
				Options: append(opts, m.Options...)})
		}
	}
	return ms
}
