package runtime

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"syscall"
	"time"

	"github.com/shoal-run/shoal/internal/errdefs"
)

// createTimeout bounds one `runc create` or `runc run --detach`.
const createTimeout = 2 * time.Minute

// Create writes the bundle, mounts the overlay and creates the container with
// `runc create`; its process waits for Start.
func (r *Runtime) Create(ctx context.Context, s Spec) (*Container, error) {
	return r.create(ctx, s, false)
}

// Run creates and starts a container with one `runc run --detach`.
func (r *Runtime) Run(ctx context.Context, s Spec) (*Container, error) {
	return r.create(ctx, s, true)
}

func (r *Runtime) create(ctx context.Context, s Spec, start bool) (_ *Container, retErr error) {
	if err := s.validate(); err != nil {
		return nil, fmt.Errorf("container %q: %w", s.ID, err)
	}
	t0 := time.Now()
	c := &ctr{done: make(chan struct{}), started: start}
	r.mu.Lock()
	if old, ok := r.ctrs[s.ID]; ok {
		r.mu.Unlock()
		if old.deleting {
			return nil, fmt.Errorf("container %q is being deleted: %w", s.ID, errdefs.ErrConflict)
		}
		return nil, fmt.Errorf("container %q: %w", s.ID, errdefs.ErrConflict)
	}
	r.ctrs[s.ID] = c
	r.mu.Unlock()
	bundle := r.bundle(s.ID)
	defer func() {
		if retErr != nil {
			// Leave nothing half-done: remove every trace of the attempt,
			// including processes a failed runtime left to this subreaper.
			r.reapOrphans(s.ID)
			c.mu.Lock()
			if !c.watching && c.pidfd != nil {
				c.pidfd.Close()
				c.pidfd = nil
			}
			c.mu.Unlock()
			if err := r.destroy(context.WithoutCancel(ctx), s.ID, c); err != nil && !errdefs.IsNotFound(err) {
				r.log.Warn("clean-up after failed create", "container", s.ID, "err", err)
			}
			r.mu.Lock()
			delete(r.ctrs, s.ID)
			r.mu.Unlock()
		}
	}()
	if err := os.Mkdir(bundle, 0o711); err != nil {
		if errors.Is(err, os.ErrExist) {
			return nil, fmt.Errorf("container %q: bundle %s exists: %w", s.ID, bundle, errdefs.ErrConflict)
		}
		return nil, fmt.Errorf("container %q: %w", s.ID, err)
	}
	if _, err := os.Stat(r.stateDir(s.ID)); err == nil {
		return nil, fmt.Errorf("container %q: %s state exists: %w", s.ID, r.name, errdefs.ErrConflict)
	}
	rw, err := r.mountDisk(ctx, bundle, s.DiskBytes)
	if err != nil {
		return nil, fmt.Errorf("container %q: %w", s.ID, err)
	}
	if s.RestoreFrom != "" {
		if err := seedUpper(s.RestoreFrom, rw); err != nil {
			return nil, fmt.Errorf("container %q: restore: %w", s.ID, err)
		}
	}
	if err := mountRootfs(bundle, rw, s.Layers); err != nil {
		return nil, fmt.Errorf("container %q: %w", s.ID, err)
	}
	u, err := resolveUser(filepath.Join(bundle, "rootfs"), s.User)
	if err != nil {
		return nil, fmt.Errorf("container %q: %w", s.ID, err)
	}
	if err := checkAccountFiles(filepath.Join(bundle, "rootfs")); err != nil {
		return nil, fmt.Errorf("container %q: %w", s.ID, err)
	}
	if err := prepareUserNS(filepath.Join(bundle, "rootfs"), &s); err != nil {
		return nil, fmt.Errorf("container %q: %w", s.ID, err)
	}
	spec, err := generate(&s, u, r.host)
	if err != nil {
		return nil, fmt.Errorf("container %q: %w", s.ID, err)
	}
	if !s.ReadOnlyRootfs {
		if err := addHostsEntry(filepath.Join(bundle, "rootfs"), spec.Hostname, s.UserNS); err != nil {
			return nil, fmt.Errorf("container %q: %w", s.ID, err)
		}
	}
	if s.UserNS != nil {
		if spec.Root.Path, err = exposeRootfs(bundle, s.UserNS.HostID); err != nil {
			return nil, fmt.Errorf("container %q: %w", s.ID, err)
		}
	}
	if !filepath.IsAbs(spec.Root.Path) {
		spec.Root.Path = filepath.Join(bundle, spec.Root.Path)
	}
	var criuArgs []string
	if s.RestoreFrom != "" {
		if !start {
			return nil, fmt.Errorf("container %q: a restore is only done by Run", s.ID)
		}
		if criuArgs, err = r.restoreArgs(ctx, &s, bundle); err != nil {
			return nil, fmt.Errorf("container %q: restore: %w", s.ID, err)
		}
		if s.UserNS != nil {
			if err := exposeMounts(bundle, spec); err != nil {
				return nil, fmt.Errorf("container %q: restore: %w", s.ID, err)
			}
		}
		s.Checkpointable = true
	}
	if s.Checkpointable {
		conf, err := r.criuConfig()
		if err != nil {
			return nil, fmt.Errorf("container %q: %w", s.ID, err)
		}
		if spec.Annotations == nil {
			spec.Annotations = map[string]string{}
		}
		spec.Annotations["org.criu.config"] = conf
		if s.Stdin == nil {
			// An empty pipe, its write end closed: CRIU cannot dump the
			// host's /dev/null.
			pr, pw, err := os.Pipe()
			if err != nil {
				return nil, fmt.Errorf("container %q: stdin: %w", s.ID, err)
			}
			pw.Close()
			defer pr.Close()
			s.Stdin = pr
		}
	}
	b, err := json.Marshal(spec)
	if err != nil {
		return nil, fmt.Errorf("container %q: %w", s.ID, err)
	}
	// The spec, with the environment, goes to the runtime's tmpfs: the
	// runtime's bundle is specDir, the root file system stays here.
	specDir := r.specDir(s.ID)
	if err := os.MkdirAll(specDir, 0o711); err != nil {
		return nil, fmt.Errorf("container %q: %w", s.ID, err)
	}
	if err := os.WriteFile(filepath.Join(specDir, "config.json"), b, 0o600); err != nil {
		return nil, fmt.Errorf("container %q: %w", s.ID, err)
	}
	tBundle := time.Now()

	sio, err := openStdio(s.Stdin, s.Stdout, s.Stderr)
	if err != nil {
		return nil, fmt.Errorf("container %q: stdio: %w", s.ID, err)
	}
	defer sio.close()
	pidFile, logFile := filepath.Join(bundle, "pid"), filepath.Join(bundle, "runtime.log")
	verb := []string{"create"}
	if start {
		verb = []string{"run", "--detach"}
	}
	if s.RestoreFrom != "" {
		verb = restoreVerb(&s, bundle)
	}
	args := append(criuArgs, "--log", logFile, "--log-format", "json")
	args = append(args, verb...)
	args = append(args, "--bundle", specDir, "--pid-file", pidFile, s.ID)
	if err := ctx.Err(); err != nil {
		return nil, fmt.Errorf("container %q: %w", s.ID, err)
	}
	// Once started, the runtime runs to the end even if the caller goes
	// away: killed half-way it would leave a container init behind that no
	// state names. Only a runtime stuck for createTimeout is killed.
	runCtx, cancel := context.WithTimeout(context.WithoutCancel(ctx), createTimeout)
	defer cancel()
	cmd := r.command(runCtx, args...)
	cmd.Stdin, cmd.Stdout, cmd.Stderr = sio.in, sio.out, sio.err
	err = startIn(cmd, runtimeNetNS(&s))
	if err == nil {
		err = cmd.Wait()
	}
	if err != nil {
		if runCtx.Err() != nil {
			return nil, fmt.Errorf("container %q: %s %s did not finish in %v: %w", s.ID, r.name, verb[0], createTimeout, runCtx.Err())
		}
		if msg := logError(logFile); msg != "" {
			return nil, fmt.Errorf("container %q: %s %s: %s%s", s.ID, r.name, verb[0], msg, restoreError(&s, bundle))
		}
		return nil, fmt.Errorf("container %q: %s %s: %w", s.ID, r.name, verb[0], err)
	}
	tRuntime := time.Now()
	pid, err := readPid(pidFile)
	if err != nil {
		return nil, fmt.Errorf("container %q: %w", s.ID, err)
	}
	if c.pidfd, err = openPidfd(pid); err != nil {
		return nil, fmt.Errorf("container %q: %w", s.ID, err)
	}
	rec := Record{
		ID: s.ID, Bundle: bundle, Pid: pid, Created: r.clock.Now(), Labels: s.Labels,
		NetNSPath: s.NetNSPath, Runtime: r.name, CgroupsPath: r.host.cgroupsPath(s.ID), CPUs: s.Limits.CPUs,
		Ephemeral: s.Ephemeral, StopSignal: int(s.StopSignal), Checkpointable: s.Checkpointable,
	}
	// The record is written before the container is published (Pid set),
	// so a Delete cannot come between and leave a record behind.
	if !rec.Ephemeral {
		if err := r.records.Put(ctx, rec); err != nil {
			return nil, fmt.Errorf("container %q: %w", s.ID, err)
		}
	}
	r.mu.Lock()
	c.rec = rec
	r.mu.Unlock()
	sio.startCopy()
	c.mu.Lock()
	c.watching = true
	c.mu.Unlock()
	go r.watch(c)
	r.log.Debug("container created", "container", s.ID, "pid", pid, "started", start,
		"bundle", tBundle.Sub(t0).String(), "runtime", tRuntime.Sub(tBundle).String(), "total", since(t0))
	return r.describe(c), nil
}

// Start starts a created container.
func (r *Runtime) Start(ctx context.Context, id string) error {
	c, err := r.get(id)
	if err != nil {
		return err
	}
	if c.exited() {
		return fmt.Errorf("container %q: %w", id, errExited)
	}
	if _, err := r.runQuiet(ctx, "start", id); err != nil {
		return fmt.Errorf("container %q: %w", id, err)
	}
	c.mu.Lock()
	c.started = true
	c.mu.Unlock()
	return nil
}

// Wait blocks until the container's init process exits or ctx ends. It may
// be called any number of times, also after the exit, until Delete.
func (r *Runtime) Wait(ctx context.Context, id string) (ExitStatus, error) {
	c, err := r.get(id)
	if err != nil {
		return ExitStatus{}, err
	}
	select {
	case <-c.done:
		return c.exit, nil
	case <-ctx.Done():
		return ExitStatus{}, fmt.Errorf("container %q: wait: %w", id, ctx.Err())
	}
}

// Signal sends sig to the container's init process.
func (r *Runtime) Signal(id string, sig syscall.Signal) error {
	c, err := r.get(id)
	if err != nil {
		return err
	}
	if err := c.signal(sig); err != nil {
		return fmt.Errorf("container %q: signal %d: %w", id, sig, err)
	}
	return nil
}

// Stop sends the container's stop signal (SIGTERM unless its Spec named
// another), waits up to grace on the Runtime's clock, then sends
// SIGKILL, and returns the exit status. A frozen container is thawed first so
// it can handle the signal.
func (r *Runtime) Stop(ctx context.Context, id string, grace time.Duration) (ExitStatus, error) {
	c, err := r.get(id)
	if err != nil {
		return ExitStatus{}, err
	}
	if c.exited() {
		return c.exit, nil
	}
	if thawed, err := r.cgroupPaths(id).Thawed(); err == nil && !thawed {
		if err := r.cgroupPaths(id).Thaw(); err != nil {
			return ExitStatus{}, fmt.Errorf("container %q: stop: %w", id, err)
		}
	}
	if grace > 0 {
		sig := syscall.SIGTERM
		if c.rec.StopSignal > 0 {
			sig = syscall.Signal(c.rec.StopSignal)
		}
		if err := c.signal(sig); err != nil && !errors.Is(err, errExited) {
			return ExitStatus{}, fmt.Errorf("container %q: stop: %w", id, err)
		}
		t := r.clock.NewTimer(grace)
		select {
		case <-c.done:
			t.Stop()
			return c.exit, nil
		case <-ctx.Done():
			t.Stop()
			return ExitStatus{}, fmt.Errorf("container %q: stop: %w", id, ctx.Err())
		case <-t.C():
		}
	}
	if err := c.signal(syscall.SIGKILL); err != nil && !errors.Is(err, errExited) {
		return ExitStatus{}, fmt.Errorf("container %q: stop: %w", id, err)
	}
	if err := awaitKilled(ctx, c, r.cgroupPaths(id)); err != nil {
		return ExitStatus{}, fmt.Errorf("container %q: stop: %w", id, err)
	}
	return c.exit, nil
}

// describe returns the public view of c.
func (r *Runtime) describe(c *ctr) *Container {
	c.mu.Lock()
	started := c.started
	c.mu.Unlock()
	status := StatusRunning
	switch {
	case c.exited():
		status = StatusStopped
	case !started:
		status = StatusCreated
	default:
		if frozen, _ := r.cgroupPaths(c.rec.ID).Frozen(); frozen {
			status = StatusPaused
		}
	}
	return &Container{
		ID: c.rec.ID, Pid: c.rec.Pid, Bundle: c.rec.Bundle, Created: c.rec.Created,
		Labels: c.rec.Labels, Status: status, NetNSPath: c.rec.NetNSPath, Runtime: c.rec.Runtime,
	}
}
