package runtime

import (
	"context"
	"errors"
	"fmt"
	"os"
	"sort"
	"strings"

	"github.com/shoal-run/shoal/internal/errdefs"
)

// Recover reconciles this host with the records; call it once at daemon start,
// before creating containers. A recorded container that still runs under
// RuntimeRoot is adopted with its PID (not restarted); its exit status will be
// unknown, as it is no longer this process's child. A record whose container
// is gone is removed with everything left of it. Runtime state, bundles,
// specs, overlay mounts and cgroups under shoal's roots that no record names are
// orphans and are deleted completely.
func (r *Runtime) Recover(ctx context.Context) (adopted []*Container, removed []string, err error) {
	recs, lerr := r.records.List(ctx)
	if lerr != nil && recs == nil {
		return nil, nil, fmt.Errorf("recover: %w", lerr)
	}
	states, err := r.listRuntime(ctx)
	if err != nil {
		return nil, nil, fmt.Errorf("recover: %w", err)
	}
	byID := map[string]runtimeState{}
	for _, s := range states {
		byID[s.ID] = s
	}
	known := map[string]bool{}
	var errs []error
	if lerr != nil {
		errs = append(errs, lerr)
	}
	for _, rec := range recs {
		known[rec.ID] = true
		r.mu.Lock()
		_, managed := r.ctrs[rec.ID]
		r.mu.Unlock()
		if managed {
			continue
		}
		st, ok := byID[rec.ID]
		if ok && (st.Status == StatusRunning || st.Status == StatusPaused || st.Status == StatusCreated) && st.Pid == rec.Pid {
			c, err := r.adopt(rec, st)
			if err == nil {
				adopted = append(adopted, r.describe(c))
				continue
			}
			r.log.Warn("cannot adopt container; removing it", "container", rec.ID, "err", err)
		} else if rec.Pid != 0 && (!ok || st.Status == StatusStopped) {
			// It ran and exited (perhaps while no daemon was running): it
			// stays listed as stopped until it is deleted, as it would have
			// without the restart. Its exit status is not known.
			adopted = append(adopted, r.describe(r.adoptStopped(rec)))
			continue
		}
		if err := r.destroy(ctx, rec.ID, nil); err != nil && !errdefs.IsNotFound(err) {
			errs = append(errs, err)
		}
		removed = append(removed, rec.ID)
	}
	orphans := map[string]bool{}
	for _, s := range states {
		if !known[s.ID] {
			orphans[s.ID] = true
		}
	}
	for _, dir := range []string{r.root, r.specRoot()} {
		if entries, err := os.ReadDir(dir); err == nil {
			for _, e := range entries {
				if !known[e.Name()] && validID(e.Name()) == nil {
					orphans[e.Name()] = true
				}
			}
		}
	}
	if mps, err := mountsUnder(r.root); err == nil {
		for _, mp := range mps {
			rel := strings.TrimPrefix(mp, r.root+"/")
			id, _, _ := strings.Cut(rel, "/")
			if id != "" && !known[id] && validID(id) == nil {
				orphans[id] = true
			}
		}
	}
	for _, id := range r.cgroupOrphans(known) {
		orphans[id] = true
	}
	// Disk images made ahead by the last daemon: the complete ones are
	// adopted, the rest removed.
	if _, err := os.Stat(r.diskDir()); err == nil {
		if _, err := r.diskPool(); err != nil {
			errs = append(errs, err)
		}
	}
	ids := make([]string, 0, len(orphans))
	for id := range orphans {
		ids = append(ids, id)
	}
	sort.Strings(ids)
	for _, id := range ids {
		if err := r.destroy(ctx, id, nil); err != nil && !errdefs.IsNotFound(err) {
			errs = append(errs, err)
			continue
		}
		removed = append(removed, id)
	}
	r.log.Info("containers recovered", "adopted", len(adopted), "removed", len(removed))
	if err := errors.Join(errs...); err != nil {
		return adopted, removed, fmt.Errorf("recover: %w", err)
	}
	return adopted, removed, nil
}

// adopt starts managing a container a previous daemon created.
func (r *Runtime) adopt(rec Record, st runtimeState) (*ctr, error) {
	f, err := openPidfd(rec.Pid)
	if err != nil {
		return nil, err
	}
	c := &ctr{rec: rec, pidfd: f, started: st.Status != StatusCreated, watching: true, done: make(chan struct{})}
	r.mu.Lock()
	r.ctrs[rec.ID] = c
	r.mu.Unlock()
	go r.watch(c)
	return c, nil
}

// adoptStopped registers a container whose init has already exited.
func (r *Runtime) adoptStopped(rec Record) *ctr {
	c := &ctr{rec: rec, started: true, done: make(chan struct{})}
	close(c.done)
	r.mu.Lock()
	r.ctrs[rec.ID] = c
	r.mu.Unlock()
	return c
}

// cgroupOrphans lists container cgroups under /shoal in any hierarchy that
// no record names.
func (r *Runtime) cgroupOrphans(known map[string]bool) []string {
	parent := r.layout.Paths(r.host.cgroupParent)
	var out []string
	for _, d := range parent.Dirs() {
		entries, err := os.ReadDir(d)
		if err != nil {
			continue
		}
		for _, e := range entries {
			if e.IsDir() && !known[e.Name()] && validID(e.Name()) == nil {
				out = append(out, e.Name())
			}
		}
	}
	return out
}
