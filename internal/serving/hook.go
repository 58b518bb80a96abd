package serving

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"github.com/shoal-run/shoal/internal/node"
	"github.com/shoal-run/shoal/internal/statemerge"
)

// HookRunner runs the apps' merge hooks on this host (localnode's Node).
type HookRunner interface {
	// RunHook runs h until it exits or ctx ends (it is then killed), and
	// removes its container.
	RunHook(ctx context.Context, h node.Hook) (ExitStatus, error)
}

// hookTimeout bounds a merge hook's run; then it is killed and the merge
// counts as failed (and is tried again).
const hookTimeout = 2 * time.Minute

// runHook runs the revision's merge hook in a short-lived container of the
// revision's image that sees the replica's state at state.dir and the
// volume at its path, with the app's limits and no network; it succeeds
// when the command exits 0. A hook cut short by a crash is run again by the
// next daemon (the note says so): a hook is run at least once, so it
// should be safe to run twice. A replica that left no state runs no hook.
func (g *merger) runHook(ctx context.Context, meta stateMeta, data, work, vol string) (statemerge.Result, string, error) {
	cfg := meta.Config
	st := cfg.State
	var res statemerge.Result
	res.Files, res.Bytes, res.Skipped = statemerge.Count(data)
	if ents, err := os.ReadDir(data); err == nil && len(ents) == 0 {
		return res, "", nil // no state, no hook
	}
	img, err := g.images.Get(ctx, meta.Digest)
	if err != nil {
		return res, "", fmt.Errorf("image %s (%s): %w", cfg.Image, meta.Digest, err)
	}
	if err := os.MkdirAll(work, 0o700); err != nil {
		return res, "", err
	}
	if err := os.MkdirAll(vol, 0o755); err != nil {
		return res, "", fmt.Errorf("volume: %w", err)
	}
	// The marker outlives a crash: the next run knows it runs again.
	var note string
	marker := filepath.Join(work, "hook-started")
	if _, err := os.Lstat(marker); err == nil {
		note = "the hook ran again: an earlier run was cut short"
	} else if !errors.Is(err, fs.ErrNotExist) {
		return res, "", err
	}
	if err := statemerge.WriteSynced(marker, nil); err != nil {
		return res, "", err
	}
	logPath := filepath.Join(work, "hook.log")
	logf, err := os.OpenFile(logPath, os.O_CREATE|os.O_WRONLY|os.O_TRUNC, 0o600)
	if err != nil {
		return res, "", err
	}
	defer logf.Close()
	env := append([]string{}, img.Config.Env...)
	for k, v := range cfg.Env {
		env = append(env, k+"="+v)
	}
	env = append(env, "SHOAL_APP="+cfg.Name, "SHOAL_REPLICA="+meta.Replica,
		"SHOAL_REVISION="+strconv.Itoa(meta.Revision), "SHOAL_STATE_DIR="+st.Dir)
	b := make([]byte, 3)
	rand.Read(b)
	id := meta.Replica + "-merge-" + hex.EncodeToString(b)
	h := node.Hook{
		ID: id, App: cfg.Name, Replica: meta.Replica, Layers: img.Layers, User: img.Config.User, Args: st.Hook, Env: env,
		Mounts: []Mount{
			{Source: data, Destination: st.Dir},
			{Source: vol, Destination: cfg.Volumes[st.Volume]},
		},
		Resources: cfg.Resources, Log: logf,
	}
	hctx, cancel := context.WithCancel(ctx)
	defer cancel()
	timer := g.clock.AfterFunc(hookTimeout, cancel)
	defer timer.Stop()
	exit, werr := g.hooks.RunHook(hctx, h)
	switch {
	case werr != nil && ctx.Err() == nil && hctx.Err() == nil:
		return res, "", fmt.Errorf("hook %s: %w", strings.Join(st.Hook, " "), werr)
	case werr != nil && ctx.Err() == nil:
		return res, "", fmt.Errorf("hook %q ran longer than %s and was killed%s", strings.Join(st.Hook, " "), hookTimeout, hookOutput(logPath))
	case werr != nil:
		return res, "", werr
	case exit.OOMKilled:
		return res, "", fmt.Errorf("hook %q ran out of memory%s", strings.Join(st.Hook, " "), hookOutput(logPath))
	case exit.Signal != 0:
		return res, "", fmt.Errorf("hook %q was killed by signal %d%s", strings.Join(st.Hook, " "), exit.Signal, hookOutput(logPath))
	case exit.Code != 0 || !exit.Known:
		return res, "", fmt.Errorf("hook %q exited with code %d%s", strings.Join(st.Hook, " "), exit.Code, hookOutput(logPath))
	}
	return res, note, nil
}

// hookOutput is the end of a failed hook's output, for the event.
func hookOutput(path string) string {
	lines := tailFile(path, 5)
	if len(lines) == 0 {
		return ""
	}
	return ": " + strings.Join(lines, " | ")
}
