package image

import (
	"fmt"
	"os"
	"slices"
)

// commit moves the staged blobs and snapshots into the store and records the
// queued images and their references, all or nothing.
func (in *ingest) commit() ([]Image, error) {
	s := in.s
	s.mu.Lock()
	defer s.mu.Unlock()
	var moved []string // paths moved into the store, undone on failure
	undo := func() {
		for _, p := range moved {
			os.RemoveAll(p)
		}
	}
	for d := range in.staged {
		dst := s.blobPath(d)
		if _, err := os.Lstat(dst); err == nil {
			continue
		}
		if err := os.Rename(in.stagedPath(d), dst); err != nil {
			undo()
			return nil, err
		}
		moved = append(moved, dst)
	}
	for d, src := range in.snaps {
		dst := s.snapPath(d)
		if _, err := os.Lstat(dst); err == nil {
			continue
		}
		if err := os.Rename(src, dst); err != nil {
			undo()
			return nil, err
		}
		moved = append(moved, dst)
	}

	oldRefs := map[*record][]string{}
	oldByRef := map[string]*record{}
	added := []string{}
	save := func(r *record) {
		if _, ok := oldRefs[r]; !ok {
			oldRefs[r] = slices.Clone(r.refs)
		}
	}
	for _, p := range in.images {
		rec := s.byDigest[p.rec.digest]
		if rec == nil {
			rec = p.rec
			s.byDigest[rec.digest] = rec
			added = append(added, rec.digest)
		}
		p.rec = rec
		save(rec)
		for _, ref := range p.refs {
			prev := s.byRef[ref]
			if _, ok := oldByRef[ref]; !ok {
				oldByRef[ref] = prev
			}
			if prev == rec {
				continue
			}
			if prev != nil {
				save(prev)
				prev.refs = slices.DeleteFunc(prev.refs, func(x string) bool { return x == ref })
			}
			rec.refs = append(rec.refs, ref)
			slices.Sort(rec.refs)
			s.byRef[ref] = rec
		}
	}
	if err := s.writeIndex(s.byDigest); err != nil {
		for r, refs := range oldRefs {
			r.refs = refs
		}
		for ref, r := range oldByRef {
			if r == nil {
				delete(s.byRef, ref)
			} else {
				s.byRef[ref] = r
			}
		}
		for _, d := range added {
			delete(s.byDigest, d)
		}
		undo()
		return nil, fmt.Errorf("writing index: %w", err)
	}
	var out []Image
	for _, p := range in.images {
		if len(p.refs) == 0 {
			out = append(out, s.image(p.rec, ""))
		}
		for _, ref := range p.refs {
			out = append(out, s.image(p.rec, ref))
		}
		s.log.Info("image stored", "refs", p.refs, "digest", p.rec.digest)
	}
	for i := range out {
		out[i].Notes = in.notes
	}
	return out, nil
}
