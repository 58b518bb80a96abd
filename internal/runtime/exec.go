package runtime

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path"
	"path/filepath"
	"strings"
	"syscall"

	"github.com/opencontainers/runtime-spec/specs-go"
	"golang.org/x/sys/unix"

	"github.com/shoal-run/shoal/internal/errdefs"
)

// ExecSpec is a process to run in a running container. It inherits the
// container's capabilities, rlimits, no_new_privs and seccomp filter.
type ExecSpec struct {
	Args []string
	// Env is added to the container's environment (same name: replaced).
	Env []string
	// Cwd defaults to the container's.
	Cwd string
	// User defaults to the container's; same forms as Spec.User.
	User   string
	Stdin  io.Reader
	Stdout io.Writer
	Stderr io.Writer
}

// Exec runs p in the container and waits for it. The exit status is the
// process's; a signal death shows as 128+signal.
func (r *Runtime) Exec(ctx context.Context, id string, p ExecSpec) (ExitStatus, error) {
	c, err := r.live(id)
	if err != nil {
		return ExitStatus{}, err
	}
	if len(p.Args) == 0 {
		return ExitStatus{}, fmt.Errorf("container %q: exec: %w", id, errdefs.Invalid("args", "a command is needed"))
	}
	if p.Cwd != "" && !path.IsAbs(p.Cwd) {
		return ExitStatus{}, fmt.Errorf("container %q: exec: %w", id, errdefs.Invalid("cwd", "%q is not an absolute path", p.Cwd))
	}
	b, err := os.ReadFile(filepath.Join(c.rec.Bundle, "config.json"))
	if err != nil {
		return ExitStatus{}, fmt.Errorf("container %q: exec: %w", id, err)
	}
	var spec specs.Spec
	if err := json.Unmarshal(b, &spec); err != nil || spec.Process == nil {
		return ExitStatus{}, fmt.Errorf("container %q: exec: bad config.json: %v", id, err)
	}
	proc := *spec.Process
	proc.Args = p.Args
	proc.Env = mergeEnv(proc.Env, p.Env)
	if p.Cwd != "" {
		proc.Cwd = p.Cwd
	}
	if p.User != "" {
		u, err := resolveUser(filepath.Join(c.rec.Bundle, "rootfs"), p.User)
		if err != nil {
			return ExitStatus{}, fmt.Errorf("container %q: exec: %w", id, err)
		}
		proc.User = specs.User{UID: u.UID, GID: u.GID, AdditionalGids: u.Groups}
	}
	if err := checkAccountFiles(filepath.Join(c.rec.Bundle, "rootfs")); err != nil {
		return ExitStatus{}, fmt.Errorf("container %q: exec: %w", id, err)
	}
	pf, err := os.CreateTemp(c.rec.Bundle, "exec-*.json")
	if err != nil {
		return ExitStatus{}, fmt.Errorf("container %q: exec: %w", id, err)
	}
	defer os.Remove(pf.Name())
	if err := json.NewEncoder(pf).Encode(proc); err != nil {
		pf.Close()
		return ExitStatus{}, fmt.Errorf("container %q: exec: %w", id, err)
	}
	pf.Close()
	pidFile := strings.TrimSuffix(pf.Name(), ".json") + ".pid"
	defer os.Remove(pidFile)
	cmd := r.command(ctx, "exec", "--pid-file", pidFile, "--process", pf.Name(), id)
	// When ctx ends, the process is killed and the runtime, whose child it
	// is, reaps it and exits on its own. Only a runtime still setting up is
	// killed itself; what it leaves is reaped below.
	cmd.Cancel = func() error {
		if killExecProcess(pidFile, cmd.Process.Pid) {
			return nil
		}
		return cmd.Process.Kill()
	}
	cmd.Stdin, cmd.Stdout = p.Stdin, p.Stdout
	var errBuf strings.Builder
	cmd.Stderr = p.Stderr
	if p.Stderr == nil {
		cmd.Stderr = &errBuf
	}
	err = cmd.Run()
	if ctx.Err() != nil {
		r.reapOrphans(id, c.rec.Pid)
		return ExitStatus{}, fmt.Errorf("container %q: exec: %w", id, ctx.Err())
	}
	var ee *exec.ExitError
	switch {
	case err == nil:
		return ExitStatus{Code: 0, Known: true}, nil
	case errors.As(err, &ee):
		code := ee.ExitCode()
		if ws, ok := ee.Sys().(syscall.WaitStatus); ok && ws.Signaled() {
			return ExitStatus{}, fmt.Errorf("container %q: exec: %s killed by %v", id, r.name, ws.Signal())
		}
		st := ExitStatus{Code: code, Known: true}
		if code > 128 && code <= 128+64 {
			st.Signal = syscall.Signal(code - 128)
		}
		return st, nil
	default:
		return ExitStatus{}, fmt.Errorf("container %q: exec: %w %s", id, err, strings.TrimSpace(errBuf.String()))
	}
}

func mergeEnv(base, extra []string) []string {
	out := append([]string(nil), base...)
	for _, e := range extra {
		name, _, _ := strings.Cut(e, "=")
		replaced := false
		for i, b := range out {
			if strings.HasPrefix(b, name+"=") {
				out[i], replaced = e, true
				break
			}
		}
		if !replaced {
			out = append(out, e)
		}
	}
	return out
}

// killExecProcess kills the process a `runc exec` started, named by its pid
// file, if it is still that runtime's child (so the pid cannot have been
// reused). It reports whether it sent the signal.
func killExecProcess(pidFile string, runtimePid int) bool {
	pid, err := readPid(pidFile)
	if err != nil {
		return false
	}
	fd, err := unix.PidfdOpen(pid, 0)
	if err != nil {
		return false
	}
	defer unix.Close(fd)
	if _, ppid, ok := procStat(pid); !ok || ppid != runtimePid {
		return false
	}
	return unix.PidfdSendSignal(fd, unix.SIGKILL, nil, 0) == nil
}
