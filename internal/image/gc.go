package image

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
)

// gcLocked deletes blobs and snapshots that no image uses and no unfinished
// write has pinned. With gone set it looks only at what those records used;
// with gone nil it sweeps both directories (done at Open, to clear what a
// crash between two steps left). Snapshots are renamed into tmp/ before
// removal so a half-deleted one is never mistaken for a whole one.
func (s *Store) gcLocked(gone []*record) error {
	usedBlobs, usedSnaps := map[string]bool{}, map[string]bool{}
	for _, r := range s.byDigest {
		for _, b := range r.blobs {
			usedBlobs[b] = true
		}
		for _, d := range r.diffIDs {
			usedSnaps[d] = true
		}
	}
	var blobs, snaps []string
	if gone != nil {
		for _, r := range gone {
			blobs = append(blobs, r.blobs...)
			snaps = append(snaps, r.diffIDs...)
		}
	} else {
		var err error
		// Blobs of index entries this store does not understand are kept.
		if !s.foreign {
			if blobs, err = listDigests(s.blobDir()); err != nil {
				return err
			}
		}
		snaps, err = listDigests(s.snapDir())
		if err != nil {
			return err
		}
	}
	var firstErr error
	keep := func(err error) {
		if err != nil && firstErr == nil {
			firstErr = err
		}
	}
	for _, b := range blobs {
		if usedBlobs[b] || s.pins[b] > 0 {
			continue
		}
		if err := os.Remove(s.blobPath(b)); err != nil && !os.IsNotExist(err) {
			keep(err)
			continue
		}
		usedBlobs[b] = true // removed once only
		s.log.Debug("image store: blob removed", "digest", b)
	}
	for _, d := range snaps {
		if usedSnaps[d] || s.pins[d] > 0 {
			continue
		}
		usedSnaps[d] = true
		if err := s.trash(s.snapPath(d)); err != nil {
			keep(fmt.Errorf("snapshot %s: %w", d, err))
			continue
		}
		s.log.Debug("image store: snapshot removed", "diffID", d)
	}
	return firstErr
}

// trash removes a directory tree by first moving it into tmp/.
func (s *Store) trash(dir string) error {
	tmp, err := os.MkdirTemp(s.tmpDir(), "trash-")
	if err != nil {
		return err
	}
	if err := os.Rename(dir, filepath.Join(tmp, "x")); err != nil && !os.IsNotExist(err) {
		os.Remove(tmp)
		return err
	}
	return os.RemoveAll(tmp)
}

// listDigests lists a directory of <hex> names as "sha256:<hex>" digests.
func listDigests(dir string) ([]string, error) {
	ents, err := os.ReadDir(dir)
	if err != nil {
		return nil, err
	}
	out := make([]string, 0, len(ents))
	for _, e := range ents {
		if !strings.HasPrefix(e.Name(), ".") {
			out = append(out, "sha256:"+e.Name())
		}
	}
	return out, nil
}
