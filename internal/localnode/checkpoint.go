package localnode

import (
	"context"
	"fmt"
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

// Checkpoint dumps replica id into dir (runtime.Checkpoint), which ends
// it; the caller removes it as any stopped replica. A failed dump leaves
// the replica as it was. Its log writer ends with the dumped container's
// pipe; a replica restored from dir gets a writer and pipe of its own.
func (n *Node) Checkpoint(ctx context.Context, id, dir string) error {
	if err := n.CheckpointUsable(ctx); err != nil {
		return fmt.Errorf("replica %s: %w", id, err)
	}
	if err := n.rt.(checkpointer).Checkpoint(ctx, id, dir); err != nil {
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
