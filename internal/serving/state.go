package serving

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"log/slog"
	"os"
	"path/filepath"
	"sync"
	"time"

	"github.com/shoal-run/shoal/internal/clock"
	"github.com/shoal-run/shoal/internal/manifest"
	"github.com/shoal-run/shoal/internal/statemerge"
)

// A replica of an app with [state] gets a state area of its own:
//
//	<app dir>/state/live/<replica>/meta.json  what the merge needs (revision, image, config)
//	<app dir>/state/live/<replica>/data/      mounted read-write at state.dir
//
// When the replica goes for good (its container deleted) the area moves to
// state/gone/<replica>/ in one rename, and the app's merger merges data/
// into the volume by the revision's policy (a work/ directory beside it
// holds the journal and temporary files), then removes the area. What is
// under state/gone is exactly what is left to merge, also after a crash.

// stateMeta is the meta.json of a state area: the merge uses the policy of
// the revision the replica ran, whatever the app's revision is by then.
type stateMeta struct {
	Replica  string          `json:"replica"`
	Revision int             `json:"revision"`
	Digest   string          `json:"digest"`
	Config   manifest.Config `json:"config"`
}

// merger merges the state areas of an app's gone replicas into its
// volumes, one area at a time, on the host where they are. A hook merge
// runs a container of its own on the runtime: no replica, so not through
// the controller's Node.
type merger struct {
	app    string
	dir    string // the app's directory: state/ and volumes/ are in it
	hooks  HookRunner
	images Images
	clock  clock.Clock
	log    *slog.Logger
	emit   func(kind, replica, reason string, inputs map[string]float64)
	took   func(policy string, d time.Duration) // a merge's time, for the metrics
	// deleting reports whether the app is being deleted: its state goes
	// with its volumes, unmerged.
	deleting func() bool
	wake     chan struct{} // an area was retired
	wg       sync.WaitGroup
}

func (g *merger) stateDir(sub string) string {
	return filepath.Join(g.dir, "state", sub)
}

// mount makes the live state area of replica id (of revision rev, whose
// config and image it runs) and returns its mount.
func (g *merger) mount(id string, rev int, cfg manifest.Config, digest string) (Mount, error) {
	area := filepath.Join(g.stateDir("live"), id)
	data := filepath.Join(area, "data")
	// meta.json first: an area without it has no data either.
	b, err := json.Marshal(stateMeta{Replica: id, Revision: rev, Digest: digest, Config: cfg})
	if err == nil {
		err = os.MkdirAll(area, 0o700)
	}
	if err == nil {
		err = statemerge.WriteSynced(filepath.Join(area, "meta.json"), b)
	}
	if err == nil {
		err = os.Mkdir(data, 0o755)
	}
	if err == nil {
		err = errors.Join(statemerge.SyncDir(area), statemerge.SyncDir(filepath.Dir(area)))
	}
	if err != nil {
		return Mount{}, fmt.Errorf("state: %w", err)
	}
	return Mount{Source: data, Destination: cfg.State.Dir}, nil
}

// retireState hands the state area of replica id, whose container is
// gone, to the merger. It does nothing for a replica without state, or
// while the app is being deleted (its state goes with its volumes).
func (g *merger) retire(id string) {
	live := filepath.Join(g.stateDir("live"), id)
	if _, err := os.Lstat(live); err != nil {
		return
	}
	if g.deleting() {
		return
	}
	gone := g.stateDir("gone")
	err := os.MkdirAll(gone, 0o700)
	if err == nil {
		err = os.Rename(live, filepath.Join(gone, id))
	}
	if err == nil {
		err = errors.Join(statemerge.SyncDir(gone), statemerge.SyncDir(filepath.Dir(live)))
	}
	if err != nil {
		g.emit("merge-failed", id, fmt.Sprintf("state kept in %s: %v", live, err), nil)
		return
	}
	poke(g.wake)
}

// retireOrphanStates retires the live areas of replicas the app does not
// have: their records were lost with a daemon that stopped before writing
// them, and their containers were removed as orphans. known tells the
// app's replicas. Called by adopt, before the controller runs.
func (g *merger) retireOrphans(known func(id string) bool) {
	ents, err := os.ReadDir(g.stateDir("live"))
	if err != nil {
		return
	}
	for _, e := range ents {
		if !known(e.Name()) {
			g.retire(e.Name())
		}
	}
}

// mergeRetryMax bounds the back-off between attempts at a merge that
// fails: 1 s, doubling up to it.
const mergeRetryMax = 5 * time.Minute

// mergeLoop merges the app's retired state areas one at a time (merges of
// one app never interleave) until ctx ends or stop is closed. A merge that
// fails keeps its area and is tried again with back-off.
func (g *merger) loop(ctx context.Context, stop <-chan struct{}) {
	defer g.wg.Done()
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	go func() {
		select {
		case <-stop:
			cancel()
		case <-ctx.Done():
		}
	}()
	type retry struct {
		n  int
		at time.Time
	}
	retries := map[string]*retry{}
	for ctx.Err() == nil {
		var wait time.Duration
		ents := statemerge.Retired(g.stateDir("gone"))
		for _, e := range ents {
			if ctx.Err() != nil || g.deleting() {
				return
			}
			id := e.Name()
			now := g.clock.Now()
			if rt := retries[id]; rt != nil && now.Before(rt.at) {
				if d := rt.at.Sub(now); wait == 0 || d < wait {
					wait = d
				}
				continue
			}
			err := g.merge(ctx, id)
			if err == nil {
				delete(retries, id)
				continue
			}
			if ctx.Err() != nil {
				return // cut short; the next daemon merges it again
			}
			rt := retries[id]
			if rt == nil {
				rt = &retry{}
				retries[id] = rt
			}
			rt.n++
			d := min(time.Second<<min(rt.n-1, 16), mergeRetryMax)
			rt.at = now.Add(d)
			if wait == 0 || d < wait {
				wait = d
			}
			g.emit("merge-failed", id, fmt.Sprintf("%v; state kept, tried again in %s", err, d),
				map[string]float64{"attempts": float64(rt.n)})
			if statemerge.HasJournal(filepath.Join(g.stateDir("gone"), id)) {
				// Its unfinished batch is cut back to the journal's sizes
				// when it is tried again: no other area may append to the
				// volume before that.
				break
			}
		}
		for id := range retries {
			if _, err := os.Lstat(filepath.Join(g.stateDir("gone"), id)); err != nil {
				delete(retries, id)
			}
		}
		var due <-chan time.Time
		var t clock.Timer
		if wait > 0 {
			t = g.clock.NewTimer(wait)
			due = t.C()
		}
		select {
		case <-ctx.Done():
		case <-g.wake:
		case <-due:
		}
		if t != nil {
			t.Stop()
		}
	}
}

// merge merges the retired state area of replica id into its volume by
// its revision's policy, then removes the area.
func (g *merger) merge(ctx context.Context, id string) error {
	area := filepath.Join(g.stateDir("gone"), id)
	b, err := os.ReadFile(filepath.Join(area, "meta.json"))
	if errors.Is(err, fs.ErrNotExist) {
		if _, derr := os.Lstat(filepath.Join(area, "data")); errors.Is(derr, fs.ErrNotExist) {
			// Cut short before its replica could start: nothing to merge.
			return os.RemoveAll(area)
		}
	}
	if err != nil {
		return fmt.Errorf("state of replica %s: %w", id, err)
	}
	var meta stateMeta
	if err := json.Unmarshal(b, &meta); err != nil {
		return fmt.Errorf("state of replica %s: meta.json: %w", id, err)
	}
	st := meta.Config.State
	if !st.Enabled() || meta.Config.Volumes[st.Volume] == "" {
		return fmt.Errorf("state of replica %s: revision %d declares no merge into a volume", id, meta.Revision)
	}
	vol := filepath.Join(g.dir, "volumes", st.Volume)
	data, work := filepath.Join(area, "data"), filepath.Join(area, "work")
	began := g.clock.Now()
	var res statemerge.Result
	var note string
	switch st.Merge {
	case manifest.MergeAppend, manifest.MergeNewest:
		res, err = statemerge.Files(ctx, st.Merge, data, work, vol)
	case manifest.MergeHook:
		res, note, err = g.runHook(ctx, meta, data, work, vol)
	default:
		err = fmt.Errorf("merge policy %q is unknown", st.Merge)
	}
	if err != nil {
		return fmt.Errorf("merge (%s) into volume %s: %w", st.Merge, st.Volume, err)
	}
	if err := os.RemoveAll(area); err != nil {
		return fmt.Errorf("merged, but the state area stays: %w", err)
	}
	statemerge.SyncDir(filepath.Dir(area))
	d := g.clock.Now().Sub(began)
	g.took(st.Merge, d)
	if res.Files == 0 && res.Kept == 0 && len(res.Skipped) == 0 && note == "" {
		g.log.Debug("serving: replica left no state", "app", g.app, "replica", id)
		return nil
	}
	why := fmt.Sprintf("%s: %d files, %d bytes of replica %s (revision %d) into volume %s", st.Merge, res.Files, res.Bytes,
		id, meta.Revision, st.Volume)
	if res.Kept > 0 {
		why += fmt.Sprintf("; %d older than the volume's copy, left out", res.Kept)
	}
	if len(res.Skipped) > 0 {
		why += fmt.Sprintf("; skipped %d entries that are not regular files: %s", len(res.Skipped), statemerge.SortedSkipped(res.Skipped, 5))
	}
	if note != "" {
		why += "; " + note
	}
	g.emit("merge", id, why, map[string]float64{"files": float64(res.Files), "bytes": float64(res.Bytes),
		"kept": float64(res.Kept), "skipped": float64(len(res.Skipped)), "seconds": d.Seconds()})
	return nil
}
