package image

import (
	"context"
	"fmt"
	"maps"
	"slices"
	"strings"

	"github.com/shoal-run/shoal/internal/errdefs"
)

// image renders a record under one reference.
func (s *Store) image(r *record, ref string) Image {
	cfg := r.config.Config
	cfg.Entrypoint = slices.Clone(cfg.Entrypoint)
	cfg.Cmd = slices.Clone(cfg.Cmd)
	cfg.Env = slices.Clone(cfg.Env)
	layers := make([]string, len(r.diffIDs))
	for i, d := range r.diffIDs {
		layers[i] = s.snapPath(d)
	}
	img := Image{Ref: ref, Digest: r.digest, ID: r.configD, Config: cfg, Layers: layers, Size: r.size}
	if r.config.Created != nil {
		img.Created = *r.config.Created
	}
	return img
}

// Get finds an image by "name:tag", "name" (tag latest), full digest
// "sha256:<hex>", or a unique prefix of at least 12 hex digits of a manifest
// digest or image ID. An unknown reference wraps errdefs.ErrNotFound.
func (s *Store) Get(ctx context.Context, ref string) (Image, error) {
	s.mu.RLock()
	defer s.mu.RUnlock()
	r, name, err := s.lookupLocked(ref)
	if err != nil {
		return Image{}, err
	}
	return s.image(r, name), nil
}

// lookupLocked resolves ref; name is the full reference when ref was a name.
func (s *Store) lookupLocked(ref string) (*record, string, error) {
	if strings.HasPrefix(ref, "sha256:") || (len(ref) >= 12 && len(ref) <= 64 && hexRE().MatchString(ref)) {
		prefix := strings.TrimPrefix(ref, "sha256:")
		if !hexRE().MatchString(prefix) || (len(prefix) < 12 && len(prefix) != 64) {
			return nil, "", errdefs.Invalid("reference", "%q: a digest needs at least 12 hex digits", ref)
		}
		var found *record
		for _, r := range s.byDigest {
			if strings.HasPrefix(strings.TrimPrefix(r.digest, "sha256:"), prefix) ||
				strings.HasPrefix(strings.TrimPrefix(r.configD, "sha256:"), prefix) {
				if found != nil && found != r {
					return nil, "", errdefs.Invalid("reference", "%q matches more than one image", ref)
				}
				found = r
			}
		}
		if found != nil {
			return found, "", nil
		}
		if strings.HasPrefix(ref, "sha256:") {
			return nil, "", fmt.Errorf("image %q: %w", ref, errdefs.ErrNotFound)
		}
	}
	full, err := normalizeRef(ref)
	if err != nil {
		return nil, "", err
	}
	r := s.byRef[full]
	if r == nil {
		return nil, "", fmt.Errorf("image %q: %w", ref, errdefs.ErrNotFound)
	}
	return r, full, nil
}

// List returns every image, one entry per reference, and one with an empty
// Ref for each image known by digest only.
func (s *Store) List(ctx context.Context) ([]Image, error) {
	s.mu.RLock()
	defer s.mu.RUnlock()
	var out []Image
	for _, r := range sortedRecords(s.byDigest) {
		if len(r.refs) == 0 {
			out = append(out, s.image(r, ""))
		}
		for _, ref := range r.refs {
			out = append(out, s.image(r, ref))
		}
	}
	return out, nil
}

// Remove deletes ref. By name it removes that reference, and the image once
// no reference is left; by digest or ID it removes the image with all its
// references. Blobs and snapshots no other image uses are deleted. If
// index.json cannot be written, nothing changes.
func (s *Store) Remove(ctx context.Context, ref string) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	r, name, err := s.lookupLocked(ref)
	if err != nil {
		return err
	}
	drop := r.refs
	if name != "" {
		drop = []string{name}
	}
	kept := *r
	kept.refs = slices.DeleteFunc(slices.Clone(r.refs), func(x string) bool { return slices.Contains(drop, x) })
	next := maps.Clone(s.byDigest)
	var gone []*record
	if len(kept.refs) == 0 {
		delete(next, r.digest)
		gone = append(gone, r)
	} else {
		next[r.digest] = &kept
	}
	if err := s.writeIndex(next); err != nil {
		return fmt.Errorf("image %q: writing index: %w", ref, err)
	}
	s.byDigest = next
	for _, x := range drop {
		delete(s.byRef, x)
	}
	for _, x := range kept.refs {
		s.byRef[x] = &kept
	}
	s.log.Info("image removed", "ref", ref, "digest", r.digest)
	if err := s.gcLocked(gone); err != nil {
		s.log.Warn("image store: garbage collection", "err", err)
	}
	return nil
}
