package localnode

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"

	"github.com/shoal-run/shoal/internal/runtime"
)

// checkpointer is a Runtime that takes checkpoints (runtime.Runtime).
type checkpointer interface {
	CheckpointUsable(ctx context.Context) error
	Checkpoint(ctx context.Context, id, dir string) error
}

// CheckpointUsable says why replicas of this node cannot be checkpointed
// (nil: they can, when started Checkpointable).
func (n *Node) CheckpointUsable(ctx context.Context) error {
	ck, ok := n.rt.(checkpointer)
	switch {
	case !ok:
		return fmt.Errorf("%w: the runtime takes no checkpoints", runtime.ErrNotCheckpointable)
	case n.init == "":
		return fmt.Errorf("%w: replicas write their logs to a file, not through shoal-init's pipe", runtime.ErrNotCheckpointable)
	}
	return ck.CheckpointUsable(ctx)
}

// Checkpoint dumps replica id into dir (relative: .checkpoints/..., under
// the apps folder; runtime.Checkpoint), which ends
// it; the caller removes it as any stopped replica. A failed dump leaves
// the replica as it was. Its log writer ends with the dumped container's
// pipe; a replica restored from dir gets a writer and pipe of its own.
func (n *Node) Checkpoint(ctx context.Context, id, dir string) error {
	if err := n.CheckpointUsable(ctx); err != nil {
		return fmt.Errorf("replica %s: %w", id, err)
	}
	p, err := n.checkpointPath(dir)
	if err != nil {
		return fmt.Errorf("replica %s: %w", id, err)
	}
	if err := os.RemoveAll(p); err != nil {
		return fmt.Errorf("replica %s: %w", id, err)
	}
	if err := n.rt.(checkpointer).Checkpoint(ctx, id, p); err != nil {
		os.RemoveAll(p)
		return fmt.Errorf("replica %s: %w", id, err)
	}
	n.dropProbe(id)
	return nil
}

// noMPTCP turns Go's Multipath TCP listeners off in env (GODEBUG
// multipathtcp=0): Go 1.24 and later listen with MPTCP by default, and
// CRIU cannot dump an MPTCP socket. Other programs ignore it.
func noMPTCP(env []string) []string {
	for i, e := range env {
		if v, ok := strings.CutPrefix(e, "GODEBUG="); ok {
			if !strings.Contains(v, "multipathtcp=") {
				env[i] = "GODEBUG=" + strings.TrimPrefix(v+",multipathtcp=0", ",")
			}
			return env
		}
	}
	return append(env, "GODEBUG=multipathtcp=0")
}

// checkpointsDir holds the checkpoints of replicas, under the apps
// folder; a daemon starting empties it (whoever took them is gone). Its
// leading dot keeps it apart from the apps' folders (<apps>/<app>): an
// app's name is a DNS label, which starts with a letter.
const checkpointsDir = ".checkpoints"

// checkpointPath is where checkpoint dir (relative, under checkpointsDir)
// lies on this node.
func (n *Node) checkpointPath(dir string) (string, error) {
	if n.dir == "" || !filepath.IsLocal(dir) || !strings.HasPrefix(dir, checkpointsDir+"/") {
		return "", fmt.Errorf("checkpoint %q is not under %s in the apps folder", dir, checkpointsDir)
	}
	return filepath.Join(n.dir, dir), nil
}

// DropCheckpoint removes checkpoint dir from disk.
func (n *Node) DropCheckpoint(dir string) error {
	p, err := n.checkpointPath(dir)
	if err != nil {
		return err
	}
	if err := os.RemoveAll(p); err != nil {
		return fmt.Errorf("checkpoint %s: %w", dir, err)
	}
	os.Remove(filepath.Dir(p)) // the app's folder, once empty
	return nil
}

// dropAllCheckpoints empties the checkpoints folder, at the start.
func (n *Node) dropAllCheckpoints() {
	if n.dir != "" {
		if err := os.RemoveAll(filepath.Join(n.dir, checkpointsDir)); err != nil {
			n.log.Warn("localnode: remove old checkpoints", "err", err)
		}
	}
}
