package kit

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"golang.org/x/sys/unix"
)

// PodmanFlags are the flags podman needs on a host with cgroup v1+v2 hybrid
// mounts, no systemd, and a hard open-files limit below podman's default:
// crun refuses hybrid cgroups, so runc runs the container; its rlimits stay
// within the host's hard limits; cgroups are managed through cgroupfs.
var PodmanFlags = []string{
	"--read-only", "--network", "none", "--cgroup-manager", "cgroupfs",
	"--ulimit", "nofile=1024:1024", "--ulimit", "nproc=1024:1024",
}

// Podman runs `podman run --rm` of a root file system folder.
type Podman struct {
	bin     string
	runtime string // --runtime
	rootfs  string
	prefix  string
}

func NewPodman(rootfs, ociRuntime string) (*Podman, error) {
	bin, err := exec.LookPath("podman")
	if err != nil {
		return nil, fmt.Errorf("podman baseline: %w", err)
	}
	return &Podman{
		bin:     bin,
		runtime: ociRuntime,
		rootfs:  rootfs,
		prefix:  fmt.Sprintf("shoal-bench-podman-%d-", os.Getpid()),
	}, nil
}

func (p *Podman) args(name, rootfs string) []string {
	a := []string{"--runtime", p.runtime, "run", "--rm"}
	if name != "" {
		a = append(a, "--name", name)
	}
	a = append(a, PodmanFlags...)
	return append(a, "--rootfs", rootfs, "/bin/true")
}

// Command returns the command line shown in the report, with DIR for the
// root file system folder and without the container name.
func (p *Podman) Command() string {
	return "podman " + strings.Join(p.args("", "DIR"), " ")
}

func (p *Podman) Run(ctx context.Context, i int) (map[string]time.Duration, error) {
	cmd := exec.CommandContext(ctx, p.bin, p.args(p.prefix+strconv.Itoa(i), p.rootfs)...)
	var stderr strings.Builder
	cmd.Stderr = &stderr
	t0 := time.Now()
	err := cmd.Run()
	d := time.Since(t0)
	ReapExited("conmon")
	if err != nil {
		return nil, fmt.Errorf("podman run (runtime %s): %w: %s", p.runtime, err, strings.TrimSpace(stderr.String()))
	}
	return map[string]time.Duration{PhaseTotal: d}, nil
}

// Cleanup removes every container this baseline may have left behind.
func (p *Podman) Cleanup(ctx context.Context) error {
	defer ReapExited("conmon")
	out, err := exec.CommandContext(ctx, p.bin, "ps", "-a", "-q", "--filter", "name=^"+p.prefix).Output()
	if err != nil {
		return fmt.Errorf("podman ps: %w", err)
	}
	ids := strings.Fields(string(out))
	if len(ids) == 0 {
		return nil
	}
	rm := exec.CommandContext(ctx, p.bin, append([]string{"rm", "-f"}, ids...)...)
	if out, err := rm.CombinedOutput(); err != nil {
		return fmt.Errorf("podman rm %v: %w: %s", ids, err, out)
	}
	return nil
}

// ReapExited reaps children of this process named comm that have exited.
// podman's container monitor (conmon) daemonizes; when this process is a
// child subreaper it inherits the monitor, and nothing else would wait for
// it.
func ReapExited(comm string) {
	tasks, _ := filepath.Glob("/proc/self/task/*/children")
	for _, t := range tasks {
		raw, err := os.ReadFile(t)
		if err != nil {
			continue
		}
		for _, f := range strings.Fields(string(raw)) {
			pid, err := strconv.Atoi(f)
			if err != nil {
				continue
			}
			stat, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
			if err != nil || !bytes.Contains(stat, []byte("("+comm+") Z")) {
				continue
			}
			var ws unix.WaitStatus
			unix.Wait4(pid, &ws, unix.WNOHANG, nil)
		}
	}
}
