package runtime

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"

	"github.com/opencontainers/runtime-spec/specs-go"

	"github.com/shoal-run/shoal/internal/errdefs"
)

var (
	crunMu     sync.Mutex
	crunProbed bool
	crunErr    error
)

// CrunUsable reports whether crun can run containers on this host, probing
// once per process by starting a container whose command does not exist: a
// crun that gets as far as exec works; one that fails earlier does not, and
// the error says why in crun's own words. The answer is cached.
func CrunUsable(ctx context.Context) error {
	crunMu.Lock()
	defer crunMu.Unlock()
	if !crunProbed {
		crunErr = probeCrun(ctx)
		crunProbed = true
	}
	return crunErr
}

const probeCmd = "/.shoal-crun-probe"

func probeCrun(ctx context.Context) error {
	bin, err := exec.LookPath("crun")
	if err != nil {
		return fmt.Errorf("runtime crun: %w: %w", err, errdefs.ErrUnavailable)
	}
	dir, err := os.MkdirTemp("", "shoal-crun-probe-")
	if err != nil {
		return fmt.Errorf("runtime crun: probe: %w", err)
	}
	defer os.RemoveAll(dir)
	if err := os.Mkdir(filepath.Join(dir, "rootfs"), 0o755); err != nil {
		return fmt.Errorf("runtime crun: probe: %w", err)
	}
	id := fmt.Sprintf("shoal-probe-%d", os.Getpid())
	spec := specs.Spec{
		Version: "1.0.2",
		Process: &specs.Process{Args: []string{probeCmd}, Cwd: "/", Env: []string{defaultPath}},
		Root:    &specs.Root{Path: "rootfs"},
		Mounts:  []specs.Mount{{Destination: "/proc", Type: "proc", Source: "proc"}},
		Linux: &specs.Linux{
			CgroupsPath: cgroupsPath(id),
			Namespaces:  []specs.LinuxNamespace{{Type: specs.PIDNamespace}, {Type: specs.MountNamespace}},
			Resources:   &specs.LinuxResources{Devices: []specs.LinuxDeviceCgroup{{Allow: false, Access: "rwm"}}},
		},
	}
	b, _ := json.Marshal(spec)
	if err := os.WriteFile(filepath.Join(dir, "config.json"), b, 0o644); err != nil {
		return fmt.Errorf("runtime crun: probe: %w", err)
	}
	state := filepath.Join(dir, "state")
	var out bytes.Buffer
	cmd := exec.CommandContext(ctx, bin, "--root", state, "run", "--bundle", dir, id)
	cmd.Stdout, cmd.Stderr = &out, &out
	runErr := cmd.Run()
	_ = exec.Command(bin, "--root", state, "delete", "--force", id).Run()
	_ = rmCgroup(id)
	msg := strings.TrimSpace(out.String())
	if runErr != nil && strings.Contains(msg, probeCmd) {
		return nil // got as far as exec: cgroups, namespaces and mounts work
	}
	if runErr == nil {
		return nil
	}
	why := fmt.Sprintf("crun fails on this host (cgroup mode %s): %s", CgroupMode(), msg)
	if CgroupMode() == "hybrid" || strings.Contains(msg, "hybrid") {
		why = fmt.Sprintf("crun does not support this host's cgroup v1+v2 hybrid mode "+
			"(v1 controllers plus a cgroup2 hierarchy that holds controllers); use runc; crun said: %q", msg)
	}
	return fmt.Errorf("runtime crun: %s: %w", why, errdefs.ErrUnavailable)
}

// rmCgroup removes the cgroup of id in every hierarchy.
func rmCgroup(id string) error {
	l, err := hostLayout()
	if err != nil {
		return err
	}
	return l.Paths(cgroupsPath(id)).Remove()
}
