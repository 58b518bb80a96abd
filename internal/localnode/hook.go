package localnode

import (
	"context"
	"fmt"
	"time"

	"github.com/shoal-run/shoal/internal/errdefs"
	"github.com/shoal-run/shoal/internal/labels"
	"github.com/shoal-run/shoal/internal/node"
	"github.com/shoal-run/shoal/internal/runtime"
)

// RunHook runs merge hook h in a container of its own, in the app's user
// namespace when the node confines apps, until it exits or ctx ends (it is
// then killed), and removes the container. An error before the container
// runs says which step failed; one after is the wait's.
func (n *Node) RunHook(ctx context.Context, h node.Hook) (node.ExitStatus, error) {
	r := h.Resources
	spec := runtime.Spec{
		ID: h.ID, Layers: h.Layers, Args: h.Args, Env: h.Env, Cwd: "/", User: h.User, Hostname: h.ID,
		Mounts: runtimeMounts(h.Mounts),
		Limits: runtime.Limits{CPUs: r.CPU, MemoryBytes: r.MemoryBytes(), Pids: r.Pids},
		// Not recorded: a daemon that dies during the hook leaves an
		// orphan that the next one removes, and runs the hook again.
		Ephemeral: true,
		Labels:    map[string]string{labels.Kind: labels.KindMerge, labels.App: h.App, labels.Replica: h.Replica},
	}
	if n.confiner != nil {
		if err := n.confiner.Confine(ctx, h.App, &spec); err != nil {
			return node.ExitStatus{}, err
		}
	}
	if h.Log != nil {
		if err := ownLog(h.Log, &spec); err != nil {
			return node.ExitStatus{}, fmt.Errorf("log: %w", err)
		}
		spec.Stdout, spec.Stderr = h.Log, h.Log
	}
	if _, err := n.rt.Run(ctx, spec); err != nil {
		return node.ExitStatus{}, fmt.Errorf("start: %w", err)
	}
	st, werr := n.rt.Wait(ctx, h.ID)
	// Delete kills what still runs and removes every trace of it.
	dctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	derr := n.rt.Delete(dctx, h.ID)
	cancel()
	if derr != nil && !errdefs.IsNotFound(derr) {
		n.log.Warn("localnode: delete merge hook container", "container", h.ID, "err", derr)
	}
	return node.ExitStatus{Code: st.Code, Signal: st.Signal, OOMKilled: st.OOMKilled, Known: st.Known}, werr
}
