package serving

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"

	"github.com/shoal-run/shoal/internal/manifest"
	"github.com/shoal-run/shoal/internal/store"
)

// DeclaredVolumes is every app's volumes in its current revision (app →
// volume name → path), as the store has them, on any node; an app being
// deleted declares none.
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
		out[name] = rec.Config.Volumes
		if rec.Config.Stateful.Enabled() {
			vols, err := ordinalVolumes(ctx, st, name, rec)
			if err != nil {
				return nil, err
			}
			out[name] = vols
		}
	}
	return out, nil
}

// ordinalVolumes are the volume folders stateful app rec uses: each
// volume's copy for every ordinal below its count, and for every ordinal
// a replica still holds (one on its way out after a scale-down).
func ordinalVolumes(ctx context.Context, st store.Store, app string, rec appRecord) (map[string]string, error) {
	ords := map[int]bool{}
	for i := 0; i < rec.Max; i++ {
		ords[i] = true
	}
	kvs, err := st.List(ctx, store.ReplicasPrefix(app))
	if err != nil {
		return nil, fmt.Errorf("replicas of app %q: %w", app, err)
	}
	for _, kv := range kvs {
		var r replicaRecord
		if json.Unmarshal(kv.Value, &r) == nil && r.Ordinal != nil {
			ords[*r.Ordinal] = true
		}
	}
	out := map[string]string{}
	for name, path := range rec.Config.Volumes {
		for i := range ords {
			out[manifest.OrdinalVolume(name, i)] = path
		}
	}
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
