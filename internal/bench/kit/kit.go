// Package kit is what the benchmark suites share besides the harness: a
// shoal daemon started from the binary under test (Daemon, StartDaemonOn),
// with example apps deployed behind its proxy (ServingEnv); shoal's runtime,
// image store and network in this process (Local, Box); the bare runc and
// podman baselines (Runc, Podman); dialing into a network namespace
// (Dialer); and the root file systems the workloads run in.
package kit

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"time"

	"github.com/shoal-run/shoal/internal/bench"
	"github.com/shoal-run/shoal/internal/image"
	"github.com/shoal-run/shoal/internal/network"
	"github.com/shoal-run/shoal/internal/runtime"
)

// Local is shoal's runtime, image store and (optionally) network manager in
// this process, under one scratch folder, for suites that run workloads in
// shoal containers.
type Local struct {
	dir    string
	parent string // cgroup parent
	images *image.Store
	net    *network.Manager // nil without a network
	rt     *runtime.Runtime
	seq    int
}

// NewLocal opens a kit; bridge and subnet may be empty for a kit without
// networking.
func NewLocal(ctx context.Context, dir, cgroupParent, bridge, subnet string) (_ *Local, retErr error) {
	k := &Local{dir: dir, parent: cgroupParent}
	defer func() {
		if retErr != nil {
			k.Close(context.WithoutCancel(ctx))
		}
	}()
	quiet := slog.New(slog.DiscardHandler)
	var err error
	if k.images, err = image.Open(filepath.Join(dir, "images"), image.WithLogger(quiet)); err != nil {
		return nil, fmt.Errorf("bench image store: %w", err)
	}
	if bridge != "" {
		k.net, err = network.New(ctx, network.Options{StateDir: filepath.Join(dir, "netns"), CNIConfDir: filepath.Join(dir, "cni"),
			Bridge: bridge, Subnet: subnet, Logger: quiet})
		if err != nil {
			return nil, fmt.Errorf("bench network %s: %w", bridge, err)
		}
	}
	k.rt, err = runtime.New(ctx, runtime.Options{Root: filepath.Join(dir, "containers"), RuntimeRoot: filepath.Join(dir, "state"),
		Runtime: "runc", CgroupParent: cgroupParent, Logger: quiet})
	if err != nil {
		return nil, fmt.Errorf("bench runtime: %w", err)
	}
	return k, nil
}

// Image builds rootfs into an image and returns its layers.
func (k *Local) Image(ctx context.Context, rootfs, tag string) ([]string, error) {
	img, err := k.images.Build(ctx, rootfs, image.BuildOptions{Tag: tag})
	if err != nil {
		return nil, fmt.Errorf("bench image %q: %w", tag, err)
	}
	return img.Layers, nil
}

// Box is a running (or created) shoal container of a kit.
type Box struct {
	k   *Local
	id  string
	Att *network.Attachment
}

// Create creates a container from spec (ID filled in) with a network
// attachment of mode when the kit has a network; start runs it.
func (k *Local) Create(ctx context.Context, spec runtime.Spec, mode network.Mode, start bool) (*Box, error) {
	k.seq++
	spec.ID = fmt.Sprintf("shoal-bench-%d-%d", os.Getpid(), k.seq)
	b := &Box{k: k, id: spec.ID}
	if k.net != nil {
		att, err := k.net.Acquire(ctx, spec.ID, mode)
		if err != nil {
			return nil, fmt.Errorf("container %q: network %s: %w", spec.ID, mode, err)
		}
		b.Att = att
		spec.NetNSPath = att.NSPath
	}
	var err error
	if start {
		_, err = k.rt.Run(ctx, spec)
	} else {
		_, err = k.rt.Create(ctx, spec)
	}
	if err != nil {
		b.Remove(context.WithoutCancel(ctx))
		return nil, err
	}
	return b, nil
}

// Remove deletes the container and releases its network.
func (b *Box) Remove(ctx context.Context) error {
	err := b.k.rt.Delete(ctx, b.id)
	if b.Att != nil {
		if rerr := b.k.net.Release(ctx, b.Att); rerr != nil && err == nil {
			err = rerr
		}
		b.Att = nil
	}
	return err
}

// Run runs spec to completion in a new container and returns its standard
// output; a non-zero exit is an error carrying its standard error.
func (k *Local) Run(ctx context.Context, spec runtime.Spec) (string, error) {
	out, err := os.CreateTemp(k.dir, "stdout-")
	if err != nil {
		return "", err
	}
	defer os.Remove(out.Name())
	defer out.Close()
	errf, err := os.CreateTemp(k.dir, "stderr-")
	if err != nil {
		return "", err
	}
	defer os.Remove(errf.Name())
	defer errf.Close()
	spec.Stdout, spec.Stderr = out, errf
	b, err := k.Create(ctx, spec, network.None, true)
	if err != nil {
		return "", err
	}
	defer b.Remove(context.WithoutCancel(ctx))
	st, err := k.rt.Wait(ctx, b.id)
	if err != nil {
		return "", err
	}
	stdout, _ := os.ReadFile(out.Name())
	if st.Code != 0 {
		msg, _ := os.ReadFile(errf.Name())
		return "", fmt.Errorf("exit %d: %s (in the container: %s)", st.Code, bench.OneLine(string(msg)), strings.Join(spec.Args, " "))
	}
	return string(stdout), nil
}

// Close deletes every container of the kit, then closes the network
// manager and the image store and removes the cgroup parent.
func (k *Local) Close(ctx context.Context) error {
	var errs []string
	if k.rt != nil {
		cs, _ := k.rt.List(ctx)
		for _, c := range cs {
			if err := k.rt.Delete(ctx, c.ID); err != nil {
				errs = append(errs, err.Error())
			}
		}
	}
	if k.net != nil {
		if err := k.net.Close(ctx); err != nil {
			errs = append(errs, err.Error())
		}
	}
	if k.images != nil {
		k.images.Close()
	}
	if k.parent != "" {
		RemoveCgroups(k.parent)
	}
	if len(errs) > 0 {
		return fmt.Errorf("bench kit cleanup: %s", strings.Join(errs, "; "))
	}
	return nil
}

// RemoveCgroups removes the cgroups at paths, empty by now, in every
// hierarchy; those that are not there are no error.
func RemoveCgroups(paths ...string) error {
	roots, _ := filepath.Glob("/sys/fs/cgroup/*")
	var errs []error
	for _, r := range append(roots, "/sys/fs/cgroup") {
		for _, p := range paths {
			if err := os.Remove(filepath.Join(r, p)); err != nil && !os.IsNotExist(err) && !errors.Is(err, syscall.ENOTDIR) {
				errs = append(errs, err)
			}
		}
	}
	return errors.Join(errs...)
}

// HostRun runs a command on the host and returns its standard output.
func HostRun(ctx context.Context, name string, args ...string) (string, error) {
	var stderr strings.Builder
	cmd := exec.CommandContext(ctx, name, args...)
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		return "", fmt.Errorf("%w: %s (on the host: %s %s)", err, bench.OneLine(stderr.String()), name, strings.Join(args, " "))
	}
	return string(out), nil
}

// ParseNS reads the nanoseconds a worker printed (its last line).
func ParseNS(out string) (time.Duration, error) {
	lines := strings.Fields(out)
	if len(lines) == 0 {
		return 0, fmt.Errorf("worker printed nothing")
	}
	d, err := time.ParseDuration(lines[len(lines)-1])
	if err != nil {
		return 0, fmt.Errorf("worker output %q: %w", bench.OneLine(out), err)
	}
	return d, nil
}

func QuietLogger() *slog.Logger { return slog.New(slog.DiscardHandler) }

func ImageBuildOptions(tag string) image.BuildOptions { return image.BuildOptions{Tag: tag} }
