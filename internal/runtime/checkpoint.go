package runtime

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"time"

	"github.com/shoal-run/shoal/internal/errdefs"
)

// Checkpoints: `runc checkpoint` dumps a container's processes with CRIU
// into an image directory and ends them; `runc restore --detach` (Spec's
// RestoreFrom) brings them back in a new container, with its own bundle,
// cgroup and network namespace, whose config.json the restore reads like
// `runc run` would. What makes a container dumpable is decided when it is
// made (Spec.Checkpointable):
//
//   - CRIU dumps no file that lies outside the container's mounts, so its
//     stdin is an empty pipe rather than the host's /dev/null; its stdout
//     and stderr must be pipes too (the caller's). runc records the pipes
//     (descriptors.json) and the restore hands its own stdio in their
//     place (CRIU's inherit-fd): a restored container writes to the pipes
//     given to it, not to the dumped container's.
//   - The network namespace is the caller's (NetNSPath): runc marks it
//     external on dump and hands the new container's to CRIU on restore,
//     so the restored processes keep their listening sockets in a
//     namespace whose loopback the caller has set up. Established TCP
//     connections (an idle keep-alive connection from the proxy, say) are
//     not carried over: CRIU's configuration for shoal (criuConfigText)
//     says tcp-close, and a restored process sees them closed.
//   - A container in a user namespace (UserNS) is not told of its network
//     namespace: its runtime runs in it (runtimeNetNS). CRIU would refuse
//     to dump a network namespace its user namespace does not own, so the
//     dump runs in that network namespace too, where CRIU takes it as its
//     own and leaves it alone, and the restore runs in the new one, where
//     the restored tasks stay. Those tasks read their images and bind
//     their mounts' sources from inside the user namespace: the images are
//     shared with its root (shareImages), the sources shown under
//     ExposeDir (exposeMounts).
//
// A failed dump leaves the container running as it was (frozen again if
// it was); a failed restore is a failed create: nothing is left.

// criuConfigText is CRIU's configuration for shoal's checkpoints, handed
// to it through the org.criu.config annotation on dump and on restore.
const criuConfigText = "tcp-close\nskip-in-flight\n"

// criuConfig writes CRIU's configuration beside the containers' specs
// (once) and returns its path.
func (r *Runtime) criuConfig() (string, error) {
	r.criuConfOnce.Do(func() {
		p := filepath.Join(r.specRoot(), "criu.conf")
		if err := os.WriteFile(p, []byte(criuConfigText), 0o644); err != nil {
			r.criuConfErr = fmt.Errorf("criu configuration: %w", err)
			return
		}
		r.criuConfPath = p
	})
	return r.criuConfPath, r.criuConfErr
}

// checkpointTimeout bounds one `runc checkpoint` or `runc restore`.
const checkpointTimeout = 2 * time.Minute

// ErrNotCheckpointable: the container was not made with
// Spec.Checkpointable, or the host cannot take checkpoints (no usable
// CRIU, an OCI runtime other than runc).
var ErrNotCheckpointable = errors.New("not checkpointable")

// CheckpointUsable says why checkpoints cannot be taken with this Runtime
// (nil: they can).
func (r *Runtime) CheckpointUsable(ctx context.Context) error {
	if r.name != "runc" {
		return fmt.Errorf("%w: checkpoints need runc, not %s", ErrNotCheckpointable, r.name)
	}
	if c := FindCRIU(ctx); !c.Usable() {
		return fmt.Errorf("%w: CRIU %s", ErrNotCheckpointable, c)
	}
	return nil
}

// Checkpoint dumps container id's processes into dir (made if missing,
// CRIU's images plus dump.log) and ends the container, as `runc checkpoint`
// does; the caller then Deletes it. A frozen container is thawed for the
// dump. When the dump fails the container keeps running (frozen again if
// it was), dir holds dump.log, and the error quotes CRIU's last error.
func (r *Runtime) Checkpoint(ctx context.Context, id, dir string) error {
	if err := r.CheckpointUsable(ctx); err != nil {
		return fmt.Errorf("container %q: checkpoint: %w", id, err)
	}
	c, err := r.get(id)
	if err != nil {
		return err
	}
	if !c.rec.Checkpointable {
		return fmt.Errorf("container %q: checkpoint: %w: it was not made checkpointable", id, ErrNotCheckpointable)
	}
	if c.exited() {
		return fmt.Errorf("container %q: checkpoint: %w", id, errExited)
	}
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return fmt.Errorf("container %q: checkpoint: %w", id, err)
	}
	paths := r.cgroupPaths(id)
	frozen, _ := paths.Frozen()
	if frozen {
		if err := paths.Thaw(); err != nil {
			return fmt.Errorf("container %q: checkpoint: %w", id, err)
		}
	}
	t0 := time.Now()
	runCtx, cancel := context.WithTimeout(context.WithoutCancel(ctx), checkpointTimeout)
	defer cancel()
	logFile := filepath.Join(c.rec.Bundle, "runtime.log")
	cmd := r.command(runCtx, "--criu", FindCRIU(ctx).Path, "--log", logFile, "--log-format", "json",
		"checkpoint", "--image-path", dir, "--work-path", dir, id)
	var out strings.Builder
	cmd.Stdout, cmd.Stderr = &out, &out
	err = startIn(cmd, r.runtimeNetNSOf(id, c.rec.NetNSPath))
	if err == nil {
		err = cmd.Wait()
	}
	if err != nil {
		msg := logError(logFile)
		if msg == "" {
			msg = strings.TrimSpace(out.String())
		}
		err = fmt.Errorf("container %q: checkpoint: %s checkpoint: %w: %s%s", id, r.name, err, msg, criuError(filepath.Join(dir, "dump.log")))
		if c.exited() {
			return err
		}
		if frozen {
			if ferr := paths.Freeze(); ferr != nil {
				err = errors.Join(err, ferr)
			}
		}
		return err
	}
	// CRIU ended the processes once dumped: wait for the watcher to see
	// init go, so that the caller's Delete finds it stopped.
	select {
	case <-c.done:
	case <-runCtx.Done():
		return fmt.Errorf("container %q: checkpoint: dumped, but init has not exited: %w", id, runCtx.Err())
	}
	// What they wrote to their root file system (checkpoint_rootfs.go).
	if err := saveUpper(c.rec.Bundle, dir); err != nil {
		return fmt.Errorf("container %q: checkpoint: %w", id, err)
	}
	r.log.Debug("container checkpointed", "container", id, "dir", dir, "took", since(t0))
	return nil
}

// criuError is the cause CRIU's log gives, as " (criu: <line>)", or "":
// the first line of the last run of error lines before its "Dumping
// FAILED" or "Restoring FAILED" (what went wrong first, not what failed
// after it: "Can't open file ... on restore", then "Unable to open fd"),
// or, with no such line, its last error line. Lines after it (a helper's
// error on the way out) are not the cause.
func criuError(file string) string {
	f, err := os.Open(file)
	if err != nil {
		return ""
	}
	defer f.Close()
	var last, first string
	inRun := false
	sc := bufio.NewScanner(f)
	sc.Buffer(make([]byte, 64<<10), 1<<20)
	for sc.Scan() {
		l := sc.Text()
		if strings.Contains(l, "FAILED") && strings.Contains(l, "Error") {
			if first != "" {
				last = first
			}
			break
		}
		isErr := strings.Contains(l, "Error")
		if isErr {
			last = strings.TrimSpace(l)
			if !inRun {
				first = last
			}
		}
		inRun = isErr
	}
	if last == "" {
		return ""
	}
	return " (criu: " + last + ")"
}

// restoreArgs are the runtime arguments that restore container id from
// the checkpoint in s.RestoreFrom, with CRIU's work directory (restore.log)
// in the bundle.
func (r *Runtime) restoreArgs(ctx context.Context, s *Spec, bundle string) ([]string, error) {
	if err := r.CheckpointUsable(ctx); err != nil {
		return nil, err
	}
	if _, err := os.Stat(filepath.Join(s.RestoreFrom, "inventory.img")); err != nil {
		return nil, fmt.Errorf("checkpoint %s: %w", s.RestoreFrom, errdefs.ErrNotFound)
	}
	work := filepath.Join(bundle, "criu")
	if err := os.Mkdir(work, 0o700); err != nil {
		return nil, err
	}
	if s.UserNS != nil {
		if err := shareImages(s.RestoreFrom, s.UserNS.HostID); err != nil {
			return nil, fmt.Errorf("checkpoint %s: %w", s.RestoreFrom, err)
		}
	}
	return []string{"--criu", FindCRIU(ctx).Path}, nil
}

// shareImages lets the restored tasks of a container in a user namespace
// read the images in dir: CRIU's restored init opens some (timens-0.img)
// as the host's root before its user namespace is mapped, others as that
// namespace's root after, so the images stay the host root's, in group
// gid (the namespace root's host gid), readable by the group.
func shareImages(dir string, gid uint32) error {
	return filepath.WalkDir(dir, func(p string, d os.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.Type()&os.ModeSymlink != 0 {
			return nil
		}
		if d.IsDir() && d.Name() == rootfsUpperDir && filepath.Dir(p) == dir {
			return filepath.SkipDir // the writable layer keeps its owners
		}
		if err := os.Lchown(p, 0, int(gid)); err != nil {
			return err
		}
		mode := os.FileMode(0o640)
		if d.IsDir() {
			mode = 0o750
		}
		return os.Chmod(p, mode)
	})
}

// restoreVerb is the verb that restores instead of `run --detach`.
func restoreVerb(s *Spec, bundle string) []string {
	return []string{"restore", "--detach", "--image-path", s.RestoreFrom, "--work-path", filepath.Join(bundle, "criu")}
}

// criuConfState is a Runtime's CRIU configuration file, written once.
type criuConfState struct {
	criuConfOnce sync.Once
	criuConfPath string
	criuConfErr  error
}

// restoreError is CRIU's last error of a failed restore, or "".
func restoreError(s *Spec, bundle string) string {
	if s.RestoreFrom == "" {
		return ""
	}
	return criuError(filepath.Join(bundle, "criu", "restore.log"))
}
