package bench

import (
	"bufio"
	"context"
	"fmt"
	"os"
	"os/exec"
	"runtime"
	"strconv"
	"strings"
	"time"

	"golang.org/x/sys/unix"
)

// Machine describes the host a suite ran on.
type Machine struct {
	CPU        string
	Cores      int
	MemoryMiB  int64
	Kernel     string
	CgroupMode string // "v1", "v2" or "hybrid"
	Runc       string
	Crun       string
	Podman     string
	Go         string
	Date       time.Time
}

// CollectMachine reads the host's description. A tool that is missing is
// reported as "not installed" rather than failing the collection.
func CollectMachine(ctx context.Context) Machine {
	m := Machine{
		CPU:        cpuModel(),
		Cores:      runtime.NumCPU(),
		MemoryMiB:  memTotalMiB(),
		Kernel:     kernelRelease(),
		CgroupMode: CgroupMode(),
		Runc:       toolVersion(ctx, "runc", "--version"),
		Crun:       toolVersion(ctx, "crun", "--version"),
		Podman:     toolVersion(ctx, "podman", "--version"),
		Go:         runtime.Version(),
		Date:       time.Now().UTC(),
	}
	return m
}

// Markdown renders the machine as a two-column table.
func (m Machine) Markdown() string {
	var b strings.Builder
	b.WriteString("| | |\n|---|---|\n")
	row := func(k, v string) { fmt.Fprintf(&b, "| %s | %s |\n", k, v) }
	row("date", m.Date.Format("2006-01-02 15:04 MST"))
	row("CPU", fmt.Sprintf("%s, %d cores", m.CPU, m.Cores))
	row("memory", fmt.Sprintf("%d MiB", m.MemoryMiB))
	row("kernel", m.Kernel)
	row("cgroups", m.CgroupMode)
	row("runc", m.Runc)
	row("crun", m.Crun)
	row("podman", m.Podman)
	row("Go", m.Go)
	return b.String()
}

func cpuModel() string {
	f, err := os.Open("/proc/cpuinfo")
	if err != nil {
		return "unknown"
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		k, v, ok := strings.Cut(sc.Text(), ":")
		if ok && strings.TrimSpace(k) == "model name" {
			return strings.TrimSpace(v)
		}
	}
	return "unknown"
}

func memTotalMiB() int64 {
	f, err := os.Open("/proc/meminfo")
	if err != nil {
		return 0
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		fields := strings.Fields(sc.Text())
		if len(fields) >= 2 && fields[0] == "MemTotal:" {
			kb, _ := strconv.ParseInt(fields[1], 10, 64)
			return kb / 1024
		}
	}
	return 0
}

func kernelRelease() string {
	var u unix.Utsname
	if err := unix.Uname(&u); err != nil {
		return "unknown"
	}
	return unix.ByteSliceToString(u.Release[:])
}

// CgroupMode reports how cgroups are mounted: "v2" when /sys/fs/cgroup is a
// cgroup2 file system, "hybrid" when v1 hierarchies sit beside a cgroup2
// mount at /sys/fs/cgroup/unified, "v1" otherwise.
func CgroupMode() string {
	var st unix.Statfs_t
	if err := unix.Statfs("/sys/fs/cgroup", &st); err == nil && st.Type == unix.CGROUP2_SUPER_MAGIC {
		return "v2"
	}
	if err := unix.Statfs("/sys/fs/cgroup/unified", &st); err == nil && st.Type == unix.CGROUP2_SUPER_MAGIC {
		return "hybrid"
	}
	return "v1"
}

func toolVersion(ctx context.Context, name string, args ...string) string {
	ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	out, err := exec.CommandContext(ctx, name, args...).Output()
	if err != nil {
		if _, lerr := exec.LookPath(name); lerr != nil {
			return "not installed"
		}
		return fmt.Sprintf("unknown (%v)", err)
	}
	line, _, _ := strings.Cut(strings.TrimSpace(string(out)), "\n")
	return line
}
