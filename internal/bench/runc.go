package bench

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	specs "github.com/opencontainers/runtime-spec/specs-go"
	"golang.org/x/sys/unix"
)

// runcBaseline runs a hand-made OCI bundle with the bare runc binary, under a
// private state root so that everything it creates can be found and removed.
type runcBaseline struct {
	bin    string // path of the runc binary
	root   string // runc --root
	bundle string // bundle folder: config.json naming the root file system
	prefix string // container ID prefix
	// errLog receives runc's stderr. It is a file, not a pipe: a created
	// container inherits runc's stdio, and a pipe would stay open until the
	// container ends.
	errLog *os.File
}

// newRuncBaseline writes a bundle under dir from `runc spec`, adjusted to run
// /bin/true without a terminal on a read-only root. With a non-nil seccomp
// profile the bundle (named name) also filters syscalls with it.
func newRuncBaseline(ctx context.Context, dir, rootfs, name string, seccomp *specs.LinuxSeccomp) (*runcBaseline, error) {
	bin, err := exec.LookPath("runc")
	if err != nil {
		return nil, fmt.Errorf("runc baseline: %w", err)
	}
	b := &runcBaseline{
		bin:    bin,
		root:   filepath.Join(dir, name+"-state"),
		bundle: filepath.Join(dir, name+"-bundle"),
		prefix: fmt.Sprintf("shoal-bench-%s-%d-", name, os.Getpid()),
	}
	if err := os.MkdirAll(b.bundle, 0o755); err != nil {
		return nil, fmt.Errorf("runc bundle %q: %w", b.bundle, err)
	}
	if b.errLog, err = os.Create(filepath.Join(dir, name+"-stderr.log")); err != nil {
		return nil, fmt.Errorf("runc baseline: %w", err)
	}
	cmd := exec.CommandContext(ctx, bin, "spec")
	cmd.Dir = b.bundle
	if out, err := cmd.CombinedOutput(); err != nil {
		return nil, fmt.Errorf("runc spec in %q: %w: %s", b.bundle, err, out)
	}
	cfgPath := filepath.Join(b.bundle, "config.json")
	raw, err := os.ReadFile(cfgPath)
	if err != nil {
		return nil, fmt.Errorf("runc bundle: %w", err)
	}
	var spec specs.Spec
	if err := json.Unmarshal(raw, &spec); err != nil {
		return nil, fmt.Errorf("runc bundle %q: config.json: %w", b.bundle, err)
	}
	spec.Process.Terminal = false
	spec.Process.Args = []string{"/bin/true"}
	spec.Root.Path = rootfs
	spec.Root.Readonly = true
	if seccomp != nil {
		spec.Linux.Seccomp = seccomp
	}
	raw, err = json.MarshalIndent(&spec, "", "  ")
	if err != nil {
		return nil, fmt.Errorf("runc bundle %q: %w", b.bundle, err)
	}
	if err := os.WriteFile(cfgPath, raw, 0o644); err != nil {
		return nil, fmt.Errorf("runc bundle: %w", err)
	}
	return b, nil
}

// command returns how a runc subcommand is shown in the report.
func (b *runcBaseline) command(sub string) string {
	switch sub {
	case "run":
		return "runc run --bundle B ID"
	case "create":
		return "runc create --bundle B ID"
	default:
		return "runc " + sub + " ID"
	}
}

func (b *runcBaseline) id(i int) string { return b.prefix + strconv.Itoa(i) }

func (b *runcBaseline) runc(ctx context.Context, args ...string) error {
	full := append([]string{"--root", b.root}, args...)
	cmd := exec.CommandContext(ctx, b.bin, full...)
	cmd.Dir = b.bundle
	b.errLog.Truncate(0)
	b.errLog.Seek(0, 0)
	cmd.Stderr = b.errLog
	if err := cmd.Run(); err != nil {
		msg, _ := os.ReadFile(b.errLog.Name())
		return fmt.Errorf("runc %s: %w: %s", strings.Join(args, " "), err, strings.TrimSpace(string(msg)))
	}
	return nil
}

// run times one `runc run`: create, start, wait for /bin/true, delete.
func (b *runcBaseline) run(ctx context.Context, i int) (map[string]time.Duration, error) {
	t0 := time.Now()
	if err := b.runc(ctx, "run", "--bundle", b.bundle, b.id(i)); err != nil {
		return nil, err
	}
	return map[string]time.Duration{phaseTotal: time.Since(t0)}, nil
}

// phases times the split lifecycle: `runc create`, `runc start`, the time
// from start's return until the container's process ends (seen through a
// pidfd), and `runc delete`.
func (b *runcBaseline) phases(ctx context.Context, i int) (map[string]time.Duration, error) {
	id := b.id(i)
	pidFile := filepath.Join(b.root, id+".pid")
	t0 := time.Now()
	if err := b.runc(ctx, "create", "--bundle", b.bundle, "--pid-file", pidFile, id); err != nil {
		return nil, err
	}
	tCreate := time.Since(t0)
	pidfd, err := openPidFile(pidFile)
	os.Remove(pidFile)
	if err != nil {
		b.runc(ctx, "delete", "--force", id)
		return nil, fmt.Errorf("container %q: %w", id, err)
	}
	defer unix.Close(pidfd)
	t1 := time.Now()
	if err := b.runc(ctx, "start", id); err != nil {
		b.runc(ctx, "delete", "--force", id)
		return nil, err
	}
	t2 := time.Now()
	if err := waitPidfd(ctx, pidfd); err != nil {
		b.runc(ctx, "delete", "--force", id)
		return nil, fmt.Errorf("container %q: %w", id, err)
	}
	t3 := time.Now()
	if err := b.runc(ctx, "delete", id); err != nil {
		return nil, err
	}
	t4 := time.Now()
	return map[string]time.Duration{
		phaseCreate: tCreate,
		phaseStart:  t2.Sub(t1),
		phaseExec:   t3.Sub(t2),
		phaseDelete: t4.Sub(t3),
		phaseTotal:  tCreate + t4.Sub(t1),
	}, nil
}

// cleanup force-deletes every container left in the private state root and
// removes the root.
func (b *runcBaseline) cleanup(ctx context.Context) error {
	cmd := exec.CommandContext(ctx, b.bin, "--root", b.root, "list", "-q")
	out, err := cmd.Output()
	var errs []string
	if err == nil {
		for _, id := range strings.Fields(string(out)) {
			if derr := b.runc(ctx, "delete", "--force", id); derr != nil {
				errs = append(errs, derr.Error())
			}
		}
	}
	if len(errs) > 0 {
		return fmt.Errorf("runc baseline cleanup: %s", strings.Join(errs, "; "))
	}
	b.errLog.Close()
	return os.RemoveAll(b.root)
}

// openPidFile reads a pid file written by an OCI runtime and opens a pidfd
// for the process, which lets the caller wait for a process it did not start.
func openPidFile(path string) (int, error) {
	raw, err := os.ReadFile(path)
	if err != nil {
		return -1, err
	}
	pid, err := strconv.Atoi(strings.TrimSpace(string(raw)))
	if err != nil {
		return -1, fmt.Errorf("pid file %q: %w", path, err)
	}
	fd, err := unix.PidfdOpen(pid, 0)
	if err != nil {
		return -1, fmt.Errorf("pidfd_open %d: %w", pid, err)
	}
	return fd, nil
}

// waitPidfd blocks until the process behind pidfd exits, then reaps it when
// it is a child of this process (a subreaper may have inherited it).
func waitPidfd(ctx context.Context, pidfd int) error {
	fds := []unix.PollFd{{Fd: int32(pidfd), Events: unix.POLLIN}}
	for {
		if err := ctx.Err(); err != nil {
			return err
		}
		n, err := unix.Poll(fds, 100)
		if err == unix.EINTR {
			continue
		}
		if err != nil {
			return fmt.Errorf("poll pidfd: %w", err)
		}
		if n > 0 {
			var info unix.Siginfo
			_ = unix.Waitid(unix.P_PIDFD, pidfd, &info, unix.WEXITED|unix.WNOHANG, nil)
			return nil
		}
	}
}
