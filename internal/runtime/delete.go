package runtime

import (
	"context"
	"errors"
	"fmt"
	"os"
	"syscall"
	"time"

	"github.com/shoal-run/shoal/internal/errdefs"
	"github.com/shoal-run/shoal/internal/runtime/cgroups"
)

// Delete removes the container completely, whatever state it is in: the
// runtime's state (killing the processes), the overlay mount, the cgroup in
// every hierarchy, the bundle and the record. Deleting twice is fine; the
// error matches errdefs.ErrNotFound only when nothing of the container existed,
// and errdefs.ErrConflict while a Create or Run of it has not returned.
func (r *Runtime) Delete(ctx context.Context, id string) error {
	if err := validID(id); err != nil {
		return fmt.Errorf("container %q: %w", id, err)
	}
	r.mu.Lock()
	c := r.ctrs[id]
	entry := c
	switch {
	case c != nil && c.deleting:
		r.mu.Unlock()
		return fmt.Errorf("container %q is being deleted: %w", id, errdefs.ErrConflict)
	case c != nil && c.rec.Pid == 0:
		// Create owns it until it returns, and removes everything itself if
		// it fails.
		r.mu.Unlock()
		return fmt.Errorf("container %q is being created: %w", id, errdefs.ErrConflict)
	case c == nil:
		// Not managed (an orphan, or nothing): hold the id so that a Create
		// cannot start on it while its remains are removed.
		entry = &ctr{deleting: true}
		r.ctrs[id] = entry
	}
	r.mu.Unlock()
	err := r.destroy(ctx, id, c)
	r.mu.Lock()
	if r.ctrs[id] == entry && !errors.Is(err, errStillRunning) {
		delete(r.ctrs, id)
	}
	r.mu.Unlock()
	return err
}

// errStillRunning: Delete gave up waiting for the container's init to exit;
// the container is left whole and managed, for Delete to be called again.
var errStillRunning = errors.New("still running")

// recordTimeout bounds the removal of a container's record.
const recordTimeout = 30 * time.Second

// destroy removes every trace of container id; c is nil for a container
// this Runtime does not manage (an orphan).
func (r *Runtime) destroy(ctx context.Context, id string, c *ctr) error {
	t0 := time.Now()
	found := c != nil
	var errs []error
	paths := r.cgroupPaths(id)
	if c != nil && c.isWatching() {
		// Fast path, no runtime process: kill init through its pidfd (the
		// kernel then kills the whole pid namespace), wait for the watcher to
		// reap it, then remove the runtime's state ourselves, as `runc
		// delete` does for a stopped container without hooks.
		if !c.exited() {
			if err := c.signal(syscall.SIGKILL); err != nil && !errors.Is(err, errExited) {
				errs = append(errs, err)
			}
		}
		if err := awaitKilled(ctx, c, paths); err != nil {
			// Still running: everything stays (state, cgroup, mounts,
			// record) for a later Delete to finish.
			return fmt.Errorf("container %q: delete: wait for exit: %w: %w", id, errStillRunning, err)
		}
		if err := os.RemoveAll(r.stateDir(id)); err != nil {
			errs = append(errs, err)
		}
	} else if _, err := os.Stat(r.stateDir(id)); err == nil {
		found = true
		if _, err := r.runQuiet(ctx, "delete", "--force", id); err != nil {
			// The runtime could not do it (broken state): kill what is left
			// through the cgroup and drop its state directory.
			r.log.Warn("runtime delete failed; cleaning up directly", "container", id, "err", err)
			if err := os.RemoveAll(r.stateDir(id)); err != nil {
				errs = append(errs, err)
			}
		}
	}
	tRuntime := time.Now()
	r.awaitHelpers(id)
	if paths.Exists() {
		found = true
		if thawed, err := paths.Thawed(); err == nil && !thawed {
			_ = paths.Thaw()
		}
		if err := paths.Remove(); err != nil {
			errs = append(errs, err)
		}
	}
	bundle := r.bundle(id)
	if err := unexposeRootfs(bundle); err != nil {
		errs = append(errs, err)
	}
	if mounted, err := unmountAll(bundle); err != nil {
		errs = append(errs, err)
	} else if mounted {
		found = true
	}
	for _, dir := range []string{bundle, r.specDir(id)} {
		if _, err := os.Lstat(dir); err == nil {
			found = true
			if err := os.RemoveAll(dir); err != nil {
				errs = append(errs, err)
			}
		}
	}
	if c == nil || !c.rec.Ephemeral {
		// Its own bound: the record of a container whose remains are gone
		// must go even when waiting for the exit used up most of ctx.
		rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), recordTimeout)
		if _, err := r.records.Get(rctx, id); err == nil {
			found = true
		}
		if err := r.records.Delete(rctx, id); err != nil {
			errs = append(errs, err)
		}
		cancel()
	}
	if err := errors.Join(errs...); err != nil {
		return fmt.Errorf("container %q: delete: %w", id, err)
	}
	if !found {
		return fmt.Errorf("container %q: %w", id, errdefs.ErrNotFound)
	}
	r.log.Debug("container deleted", "container", id, "runtime", tRuntime.Sub(t0).String(), "total", since(t0))
	return nil
}

// awaitKilled waits for the exit of c's init, sent SIGKILL, keeping its
// cgroup thawed meanwhile: frozen tasks die only once thawed (cgroup v1),
// and a freeze may be under way at the kill (FREEZING) or begin after it
// (the serving ladder freezing an idle replica that is being removed), so
// one thaw before waiting could leave init frozen, killed but alive.
func awaitKilled(ctx context.Context, c *ctr, paths cgroups.Paths) error {
	poll := 5 * time.Millisecond
	for {
		if thawed, err := paths.Thawed(); err == nil && !thawed {
			_ = paths.Thaw()
		}
		t := time.NewTimer(poll)
		select {
		case <-c.done:
			t.Stop()
			return nil
		case <-ctx.Done():
			t.Stop()
			return ctx.Err()
		case <-t.C:
		}
		poll = min(2*poll, 500*time.Millisecond)
	}
}
