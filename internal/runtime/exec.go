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
	"time"

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
// process's; a signal death shows as 128+signal. If ctx ends first, the
// process is killed and the error wraps ctx's.
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
	specDir := r.specDir(id)
	b, err := os.ReadFile(filepath.Join(specDir, "config.json"))
	if errors.Is(err, os.ErrNotExist) {
		// Made by a daemon that kept the spec in the bundle.
		specDir = c.rec.Bundle
		b, err = os.ReadFile(filepath.Join(specDir, "config.json"))
	}
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
	// The process spec holds the environment: beside config.json.
	pf, err := os.CreateTemp(specDir, "exec-*.json")
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
	// The runtime runs to the end even if ctx ends: killed while it sets
	// the process up, it would leave its init stages to this subreaper.
	// Cancelling kills the process instead, once the runtime has named it in
	// the pid file; the runtime then reaps it and exits on its own.
	cmd := r.command(context.WithoutCancel(ctx), "exec", "--pid-file", pidFile, "--process", pf.Name(), id)
	cmd.Stdin, cmd.Stdout = p.Stdin, p.Stdout
	var errBuf strings.Builder
	cmd.Stderr = p.Stderr
	if p.Stderr == nil {
		cmd.Stderr = &errBuf
	}
	netns := ""
	if len(spec.Linux.UIDMappings) > 0 {
		netns = c.rec.NetNSPath
	}
	if err := startIn(cmd, netns); err != nil {
		return ExitStatus{}, fmt.Errorf("container %q: exec: %w", id, err)
	}
	exited := make(chan struct{})
	killedRuntime := make(chan bool, 1)
	go func() {
		select {
		case <-exited:
			killedRuntime <- false
		case <-ctx.Done():
			killedRuntime <- r.cancelExec(cmd.Process, pidFile, exited)
		}
	}()
	err = cmd.Wait()
	close(exited)
	if <-killedRuntime {
		r.reapOrphans(id)
	}
	if ctx.Err() != nil {
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

// execSetupTimeout bounds how long a cancelled Exec waits for the runtime to
// name the process before it kills the runtime itself.
const execSetupTimeout = time.Minute

// cancelExec ends a `runc exec` whose caller has gone: it kills the process
// as soon as the pid file names it, or, if the runtime is stuck setting it
// up for execSetupTimeout, the runtime itself. It reports whether it killed
// the runtime, whose orphans then need reaping.
func (r *Runtime) cancelExec(runtime *os.Process, pidFile string, exited <-chan struct{}) bool {
	deadline := time.Now().Add(execSetupTimeout)
	for time.Now().Before(deadline) {
		if killExecProcess(pidFile, runtime.Pid) {
			return false
		}
		select {
		case <-exited:
			return false
		case <-time.After(5 * time.Millisecond):
		}
	}
	r.log.Warn("exec set-up did not finish; killing the runtime", "pid", runtime.Pid)
	_ = runtime.Kill()
	return true
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
