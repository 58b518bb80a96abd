package kit

import (
	"bytes"
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
	"github.com/shoal-run/shoal/internal/bench"
	"golang.org/x/sys/unix"
)

// Runc runs a hand-made OCI bundle with the bare runc binary, under a
// private state root so that everything it creates can be found and removed.
type Runc struct {
	Bin    string // path of the runc binary
	Root   string // runc --root
	Bundle string // bundle folder: config.json naming the root file system
	prefix string // container ID prefix
	// errLog receives runc's stderr. It is a file, not a pipe: a created
	// container inherits runc's stdio, and a pipe would stay open until the
	// container ends.
	errLog *os.File
}

// NewRunc writes a bundle under dir from `runc spec`, adjusted to run
// /bin/true without a terminal on a read-only root. With a non-nil seccomp
// profile the bundle (named name) also filters syscalls with it.
func NewRunc(ctx context.Context, dir, rootfs, name string, seccomp *specs.LinuxSeccomp) (*Runc, error) {
	bin, err := exec.LookPath("runc")
	if err != nil {
		return nil, fmt.Errorf("runc baseline: %w", err)
	}
	b := &Runc{
		Bin:    bin,
		Root:   filepath.Join(dir, name+"-state"),
		Bundle: filepath.Join(dir, name+"-bundle"),
		prefix: fmt.Sprintf("shoal-bench-%s-%d-", name, os.Getpid()),
	}
	if err := os.MkdirAll(b.Bundle, 0o755); err != nil {
		return nil, fmt.Errorf("runc bundle %q: %w", b.Bundle, err)
	}
	if b.errLog, err = os.Create(filepath.Join(dir, name+"-stderr.log")); err != nil {
		return nil, fmt.Errorf("runc baseline: %w", err)
	}
	cmd := exec.CommandContext(ctx, bin, "spec")
	cmd.Dir = b.Bundle
	if out, err := cmd.CombinedOutput(); err != nil {
		return nil, fmt.Errorf("runc spec in %q: %w: %s", b.Bundle, err, out)
	}
	cfgPath := filepath.Join(b.Bundle, "config.json")
	raw, err := os.ReadFile(cfgPath)
	if err != nil {
		return nil, fmt.Errorf("runc bundle: %w", err)
	}
	var spec specs.Spec
	if err := json.Unmarshal(raw, &spec); err != nil {
		return nil, fmt.Errorf("runc bundle %q: config.json: %w", b.Bundle, err)
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
		return nil, fmt.Errorf("runc bundle %q: %w", b.Bundle, err)
	}
	if err := os.WriteFile(cfgPath, raw, 0o644); err != nil {
		return nil, fmt.Errorf("runc bundle: %w", err)
	}
	return b, nil
}

// Command returns how a runc subcommand is shown in the report.
func (b *Runc) Command(sub string) string {
	switch sub {
	case "run":
		return "runc run --bundle B ID"
	case "create":
		return "runc create --bundle B ID"
	default:
		return "runc " + sub + " ID"
	}
}

func (b *Runc) ID(i int) string { return b.prefix + strconv.Itoa(i) }

func (b *Runc) Runc(ctx context.Context, args ...string) error {
	full := append([]string{"--root", b.Root}, args...)
	cmd := exec.CommandContext(ctx, b.Bin, full...)
	cmd.Dir = b.Bundle
	b.errLog.Truncate(0)
	b.errLog.Seek(0, 0)
	cmd.Stderr = b.errLog
	if err := cmd.Run(); err != nil {
		msg, _ := os.ReadFile(b.errLog.Name())
		return fmt.Errorf("runc %s: %w: %s", strings.Join(args, " "), err, strings.TrimSpace(string(msg)))
	}
	return nil
}

// Run times one `runc run`: create, start, wait for /bin/true, delete.
func (b *Runc) Run(ctx context.Context, i int) (map[string]time.Duration, error) {
	t0 := time.Now()
	if err := b.Runc(ctx, "run", "--bundle", b.Bundle, b.ID(i)); err != nil {
		return nil, err
	}
	return map[string]time.Duration{PhaseTotal: time.Since(t0)}, nil
}

// Phases times the split lifecycle: `runc create`, `runc start`, the time
// from start's return until the container's process ends (seen through a
// pidfd), and `runc delete`.
func (b *Runc) Phases(ctx context.Context, i int) (map[string]time.Duration, error) {
	id := b.ID(i)
	pidFile := filepath.Join(b.Root, id+".pid")
	t0 := time.Now()
	if err := b.Runc(ctx, "create", "--bundle", b.Bundle, "--pid-file", pidFile, id); err != nil {
		return nil, err
	}
	tCreate := time.Since(t0)
	pidfd, err := openPidFile(pidFile)
	os.Remove(pidFile)
	if err != nil {
		b.Runc(ctx, "delete", "--force", id)
		return nil, fmt.Errorf("container %q: %w", id, err)
	}
	defer unix.Close(pidfd)
	t1 := time.Now()
	if err := b.Runc(ctx, "start", id); err != nil {
		b.Runc(ctx, "delete", "--force", id)
		return nil, err
	}
	t2 := time.Now()
	if err := waitPidfd(ctx, pidfd); err != nil {
		b.Runc(ctx, "delete", "--force", id)
		return nil, fmt.Errorf("container %q: %w", id, err)
	}
	t3 := time.Now()
	if err := b.Runc(ctx, "delete", id); err != nil {
		return nil, err
	}
	t4 := time.Now()
	return map[string]time.Duration{
		PhaseCreate: tCreate,
		PhaseStart:  t2.Sub(t1),
		PhaseExec:   t3.Sub(t2),
		PhaseDelete: t4.Sub(t3),
		PhaseTotal:  tCreate + t4.Sub(t1),
	}, nil
}

// Cleanup force-deletes every container left in the private state root and
// removes the root.
func (b *Runc) Cleanup(ctx context.Context) error {
	cmd := exec.CommandContext(ctx, b.Bin, "--root", b.Root, "list", "-q")
	out, err := cmd.Output()
	var errs []string
	if err == nil {
		for _, id := range strings.Fields(string(out)) {
			if derr := b.Runc(ctx, "delete", "--force", id); derr != nil {
				errs = append(errs, derr.Error())
			}
		}
	}
	if len(errs) > 0 {
		return fmt.Errorf("runc baseline cleanup: %s", strings.Join(errs, "; "))
	}
	b.errLog.Close()
	return os.RemoveAll(b.Root)
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

// SetArgs changes the command of the baseline's bundle.
func (b *Runc) SetArgs(args ...string) error {
	path := filepath.Join(b.Bundle, "config.json")
	raw, err := os.ReadFile(path)
	if err != nil {
		return err
	}
	var spec specs.Spec
	if err := json.Unmarshal(raw, &spec); err != nil {
		return err
	}
	spec.Process.Args = args
	raw, err = json.Marshal(&spec)
	if err != nil {
		return err
	}
	return os.WriteFile(path, raw, 0o644)
}

// Output runs the bundle with `runc run` and returns its standard output.
func (b *Runc) Output(ctx context.Context, id string) (string, error) {
	cmd := exec.CommandContext(ctx, b.Bin, "--root", b.Root, "run", "--bundle", b.Bundle, id)
	var out, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &stderr
	if err := cmd.Run(); err != nil {
		exec.Command(b.Bin, "--root", b.Root, "delete", "--force", id).Run()
		return "", fmt.Errorf("runc run: %w: %s", err, bench.OneLine(stderr.String()))
	}
	return out.String(), nil
}
