package serving

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"

	"github.com/shoal-run/shoal/internal/errdefs"
	"github.com/shoal-run/shoal/internal/manifest"
	"github.com/shoal-run/shoal/internal/store"
)

// DeclaredVolumes is every app's volumes in use (app → volume name →
// path), as the store has them, on any node: those of its current
// revision, and of every revision a replica still runs or a rollout or
// traffic split may still start (usedVolumes). An app being deleted
// declares none.
func DeclaredVolumes(ctx context.Context, st store.Store) (map[string]map[string]string, error) {
	kvs, err := st.List(ctx, store.AppsPrefix)
	if err != nil {
		return nil, fmt.Errorf("apps: %w", err)
	}
	out := map[string]map[string]string{}
	for _, kv := range kvs {
		var rec appRecord
		if err := json.Unmarshal(kv.Value, &rec); err != nil || rec.Deleting {
			continue
		}
		name := strings.TrimPrefix(kv.Key, store.AppsPrefix)
		vols, err := usedVolumes(ctx, st, name, rec)
		if err != nil {
			return nil, err
		}
		out[name] = vols
	}
	return out, nil
}

// usedVolumes are the volume folders app rec uses: the volumes its current
// revision declares and those of every other revision a replica still
// runs (a rollout, a traffic split), that traffic goes to, or that a
// rollout under way comes from. A stateful revision's are each volume's
// copy for every ordinal below the app's count, and for every ordinal a
// replica still holds (one on its way out after a scale-down).
func usedVolumes(ctx context.Context, st store.Store, app string, rec appRecord) (map[string]string, error) {
	ords := map[int]bool{}
	for i := 0; i < rec.Max; i++ {
		ords[i] = true
	}
	revs := map[int]bool{}
	kvs, err := st.List(ctx, store.ReplicasPrefix(app))
	if err != nil {
		return nil, fmt.Errorf("replicas of app %q: %w", app, err)
	}
	for _, kv := range kvs {
		var r replicaRecord
		if json.Unmarshal(kv.Value, &r) != nil {
			continue
		}
		revs[r.Revision] = true
		if r.Ordinal != nil {
			ords[*r.Ordinal] = true
		}
	}
	for _, t := range rec.Traffic {
		revs[t.Revision] = true
	}
	if ro := rec.Rollout; ro != nil && ro.State == rolloutProgressing && ro.From > 0 {
		revs[ro.From] = true
	}
	out := map[string]string{}
	add := func(cfg manifest.Config) {
		for name, path := range cfg.Volumes {
			if !cfg.Stateful.Enabled() {
				out[name] = path
				continue
			}
			for i := range ords {
				out[manifest.OrdinalVolume(name, i)] = path
			}
		}
	}
	delete(revs, rec.Revision)
	for n := range revs {
		kv, err := st.Get(ctx, store.RevisionKey(app, n))
		if errors.Is(err, errdefs.ErrNotFound) {
			continue // pruned: no replica of it is left to mount anything
		}
		if err != nil {
			return nil, fmt.Errorf("app %q: revision %d: %w", app, n, err)
		}
		var rv revisionRecord
		if err := json.Unmarshal(kv.Value, &rv); err != nil {
			return nil, fmt.Errorf("app %q: revision %d: %w", app, n, err)
		}
		add(rv.Config)
	}
	add(rec.Config) // the current revision's mount paths win
	return out, nil
}

// removeAppDir removes an app's folder but its volumes, which stay for
// `shoal volume` and an app of the same name deployed again.
func removeAppDir(dir string) error {
	ents, err := os.ReadDir(dir)
	if errors.Is(err, os.ErrNotExist) {
		return nil
	}
	if err != nil {
		return err
	}
	var errs []error
	for _, e := range ents {
		if e.Name() != "volumes" {
			errs = append(errs, os.RemoveAll(filepath.Join(dir, e.Name())))
		}
	}
	// The folder goes once it holds no kept volume (none, or an empty
	// volumes folder).
	if err := os.Remove(filepath.Join(dir, "volumes")); err == nil || errors.Is(err, os.ErrNotExist) {
		os.Remove(dir)
	}
	return errors.Join(errs...)
}
