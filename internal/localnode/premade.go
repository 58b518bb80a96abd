package localnode

import (
	"context"
	"fmt"
	"os"
	"slices"

	"github.com/shoal-run/shoal/internal/errdefs"
	"github.com/shoal-run/shoal/internal/node"
	"github.com/shoal-run/shoal/internal/runtime"
	"github.com/shoal-run/shoal/internal/sandbox/stub"
)

// waiting is a premade replica's pid 1, shoal-init in its stub mode, which
// waits on stdin (a pipe whose write end is w) for cmd, the app's
// entrypoint, then execs it. A daemon that dies closes w: the pid 1 reads
// no command and exits, and the next daemon removes the container (its
// replica has no record).
type waiting struct {
	w   *os.File
	cmd []byte
}

// Premake makes replica s as Start would, but its container's process is
// shoal-init (mounted at InitPath) waiting for Boot: namespaces, cgroup
// with the app's limits, root file system, network, secrets and log are
// the replica's; the process's user and environment are the app's, and
// the entrypoint, its arguments and working directory are what Boot has
// it exec. It needs shoal-init.
func (n *Node) Premake(ctx context.Context, s node.ReplicaSpec) (node.Premade, error) {
	var pm node.Premade
	if n.init == "" {
		return pm, fmt.Errorf("premade replicas need shoal-init: %w", errdefs.ErrUnavailable)
	}
	var wt *waiting
	st, err := n.start(ctx, s, func(spec *runtime.Spec) error {
		r, w, err := os.Pipe()
		if err != nil {
			return fmt.Errorf("premade replica %s: %w", s.ID, err)
		}
		wt = &waiting{w: w, cmd: stub.Encode(stub.Cmd{Args: spec.Args, Cwd: spec.Cwd})}
		if !slices.ContainsFunc(spec.Mounts, func(m runtime.Mount) bool { return m.Destination == InitPath }) {
			spec.Mounts = append(spec.Mounts, runtime.Mount{Source: n.init, Destination: InitPath, ReadOnly: true,
				Options: []string{"nosuid", "nodev"}})
		}
		spec.Args, spec.Stdin = []string{InitPath}, r
		return nil
	})
	if wt != nil {
		if err != nil {
			wt.w.Close()
		} else {
			n.mu.Lock()
			n.premade[s.ID] = wt
			n.mu.Unlock()
		}
	}
	if err != nil {
		return pm, err
	}
	pm.Started = st
	if stats, err := n.rt.Stats(s.ID); err == nil {
		pm.Memory = int64(stats.MemoryBytes)
	}
	return pm, nil
}

// Boot hands premade replica id's pid 1 its command: it execs the app's
// entrypoint.
func (n *Node) Boot(_ context.Context, id string) error {
	n.mu.Lock()
	wt := n.premade[id]
	delete(n.premade, id)
	n.mu.Unlock()
	if wt == nil {
		return fmt.Errorf("replica %s: no premade replica waits: %w", id, errdefs.ErrNotFound)
	}
	_, err := wt.w.Write(wt.cmd)
	wt.w.Close()
	if err != nil {
		return fmt.Errorf("replica %s: boot: %w", id, err)
	}
	return nil
}

// unwait forgets replica id's waiting pid 1, if it has one: closing the
// pipe ends it.
func (n *Node) unwait(id string) {
	n.mu.Lock()
	wt := n.premade[id]
	delete(n.premade, id)
	n.mu.Unlock()
	if wt != nil {
		wt.w.Close()
	}
}
