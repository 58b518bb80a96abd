package serving

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"time"

	"github.com/shoal-run/shoal/internal/clock"
	"github.com/shoal-run/shoal/internal/manifest"
	"github.com/shoal-run/shoal/internal/runtime"
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

func (ctl *appCtl) stateDir(sub string) string {
	return filepath.Join(ctl.m.appDir(ctl.name), "state", sub)
}

// stateMount makes replica r's live state area and returns its mount.
func (ctl *appCtl) stateMount(r *replica, cfg manifest.Config, digest string) (runtime.Mount, error) {
	area := filepath.Join(ctl.stateDir("live"), r.rec.ID)
	data := filepath.Join(area, "data")
	// meta.json first: an area without it has no data either.
	b, err := json.Marshal(stateMeta{Replica: r.rec.ID, Revision: r.rec.Revision, Digest: digest, Config: cfg})
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
		return runtime.Mount{}, fmt.Errorf("state: %w", err)
	}
	return runtime.Mount{Source: data, Destination: cfg.State.Dir}, nil
}

// retireState hands the state area of replica id, whose container is
// gone, to the merger. It does nothing for a replica without state, or
// while the app is being deleted (its state goes with its volumes).
func (ctl *appCtl) retireState(id string) {
	live := filepath.Join(ctl.stateDir("live"), id)
	if _, err := os.Lstat(live); err != nil {
		return
	}
	ctl.mu.Lock()
	deleting := ctl.deleting
	ctl.unlock()
	if deleting {
		return
	}
	gone := ctl.stateDir("gone")
	err := os.MkdirAll(gone, 0o700)
	if err == nil {
		err = os.Rename(live, filepath.Join(gone, id))
	}
	if err == nil {
		err = errors.Join(statemerge.SyncDir(gone), statemerge.SyncDir(filepath.Dir(live)))
	}
	if err != nil {
		ctl.m.emit("merge-failed", ctl.name, id, fmt.Sprintf("state kept in %s: %v", live, err), nil)
		return
	}
	ctl.poke(ctl.merges)
}

// retireOrphanStates retires the live areas of replicas the app does not
// have: their records were lost with a daemon that stopped before writing
// them, and their containers were removed as orphans. Called by adopt,
// before the controller runs.
func (ctl *appCtl) retireOrphanStates() {
	ents, err := os.ReadDir(ctl.stateDir("live"))
	if err != nil {
		return
	}
	for _, e := range ents {
		ctl.mu.Lock()
		known := ctl.reps[e.Name()] != nil
		ctl.unlock()
		if !known {
			ctl.retireState(e.Name())
		}
	}
}

// mergeRetryMax bounds the back-off between attempts at a merge that
// fails: 1 s, doubling up to it.
const mergeRetryMax = 5 * time.Minute

// mergeLoop merges the app's retired state areas one at a time (merges of
// one app never interleave) until the controller stops. A merge that fails
// keeps its area and is tried again with back-off.
func (ctl *appCtl) mergeLoop() {
	defer ctl.mergeWG.Done()
	ctx, cancel := context.WithCancel(ctl.ctx())
	defer cancel()
	go func() {
		select {
		case <-ctl.stop:
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
		ents := statemerge.Retired(ctl.stateDir("gone"))
		for _, e := range ents {
			ctl.mu.Lock()
			deleting := ctl.deleting
			ctl.unlock()
			if ctx.Err() != nil || deleting {
				return
			}
			id := e.Name()
			now := ctl.m.clock.Now()
			if rt := retries[id]; rt != nil && now.Before(rt.at) {
				if d := rt.at.Sub(now); wait == 0 || d < wait {
					wait = d
				}
				continue
			}
			err := ctl.mergeState(ctx, id)
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
			ctl.m.emit("merge-failed", ctl.name, id, fmt.Sprintf("%v; state kept, tried again in %s", err, d),
				map[string]float64{"attempts": float64(rt.n)})
			if statemerge.HasJournal(filepath.Join(ctl.stateDir("gone"), id)) {
				// Its unfinished batch is cut back to the journal's sizes
				// when it is tried again: no other area may append to the
				// volume before that.
				break
			}
		}
		for id := range retries {
			if _, err := os.Lstat(filepath.Join(ctl.stateDir("gone"), id)); err != nil {
				delete(retries, id)
			}
		}
		var due <-chan time.Time
		var t clock.Timer
		if wait > 0 {
			t = ctl.m.clock.NewTimer(wait)
			due = t.C()
		}
		select {
		case <-ctx.Done():
		case <-ctl.merges:
		case <-due:
		}
		if t != nil {
			t.Stop()
		}
	}
}

// mergeState merges the retired state area of replica id into its volume
// by its revision's policy, then removes the area.
func (ctl *appCtl) mergeState(ctx context.Context, id string) error {
	m := ctl.m
	area := filepath.Join(ctl.stateDir("gone"), id)
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
	vol := filepath.Join(m.appDir(ctl.name), "volumes", st.Volume)
	data, work := filepath.Join(area, "data"), filepath.Join(area, "work")
	began := m.clock.Now()
	var res statemerge.Result
	var note string
	switch st.Merge {
	case manifest.MergeAppend, manifest.MergeNewest:
		res, err = statemerge.Files(ctx, st.Merge, data, work, vol)
	case manifest.MergeHook:
		res, note, err = ctl.runHook(ctx, meta, data, work, vol)
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
	d := m.clock.Now().Sub(began)
	m.metrics.merge(ctl.name, st.Merge, d)
	if res.Files == 0 && res.Kept == 0 && len(res.Skipped) == 0 && note == "" {
		m.log.Debug("serving: replica left no state", "app", ctl.name, "replica", id)
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
	m.emit("merge", ctl.name, id, why, map[string]float64{"files": float64(res.Files), "bytes": float64(res.Bytes),
		"kept": float64(res.Kept), "skipped": float64(len(res.Skipped)), "seconds": d.Seconds()})
	return nil
}
