package image

import (
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"slices"
	"strings"

	ocispec "github.com/opencontainers/image-spec/specs-go/v1"

	"github.com/shoal-run/shoal/internal/errdefs"
)

// loadRecord reads a manifest and its config from the store, and checks that
// its snapshots exist.
func (s *Store) loadRecord(d ocispec.Descriptor) (*record, error) {
	mb, err := s.readBlob(string(d.Digest))
	if err != nil {
		return nil, fmt.Errorf("manifest %s: %w", d.Digest, err)
	}
	cb, err := s.readBlob(configDigest(mb))
	if err != nil {
		return nil, fmt.Errorf("manifest %s: config: %w", d.Digest, err)
	}
	rec, err := newRecord(ocispec.Descriptor{MediaType: d.MediaType, Digest: d.Digest, Size: d.Size}, mb, cb)
	if err != nil {
		return nil, err
	}
	for _, id := range rec.diffIDs {
		if _, err := os.Stat(s.snapPath(id)); err != nil {
			return nil, fmt.Errorf("manifest %s: snapshot: %w", d.Digest, err)
		}
	}
	return rec, nil
}

func (s *Store) readIndex() (ocispec.Index, error) {
	var idx ocispec.Index
	b, err := os.ReadFile(filepath.Join(s.root, ocispec.ImageIndexFile))
	if errors.Is(err, os.ErrNotExist) {
		return ocispec.Index{}, nil
	}
	if err != nil {
		return idx, err
	}
	if err := json.Unmarshal(b, &idx); err != nil {
		return idx, fmt.Errorf("index.json: %w", err)
	}
	return idx, nil
}

// writeIndexFile replaces index.json with its new content. Tests swap it to
// make that write fail.
var writeIndexFile = writeFileAtomic

// writeIndex replaces index.json with the images of recs (keyed by manifest
// digest), which need not be the in-memory index yet: callers write first
// and change memory only once the write succeeded.
func (s *Store) writeIndex(recs map[string]*record) error {
	idx := ocispec.Index{MediaType: ocispec.MediaTypeImageIndex, Manifests: []ocispec.Descriptor{}}
	idx.SchemaVersion = 2
	idx.Manifests = append(idx.Manifests, s.foreignDescs...)
	for _, r := range sortedRecords(recs) {
		if len(r.refs) == 0 {
			d := r.manifest
			d.Annotations = nil
			idx.Manifests = append(idx.Manifests, d)
		}
		for _, ref := range r.refs {
			d := r.manifest
			d.Annotations = map[string]string{ocispec.AnnotationRefName: ref}
			idx.Manifests = append(idx.Manifests, d)
		}
	}
	b, err := json.MarshalIndent(idx, "", "  ")
	if err != nil {
		return err
	}
	return writeIndexFile(filepath.Join(s.root, ocispec.ImageIndexFile), b)
}

// sortedRecords returns records sorted by first reference, then digest.
func sortedRecords(m map[string]*record) []*record {
	recs := make([]*record, 0, len(m))
	for _, r := range m {
		recs = append(recs, r)
	}
	slices.SortFunc(recs, func(a, b *record) int {
		return strings.Compare(firstRef(a)+"@"+a.digest, firstRef(b)+"@"+b.digest)
	})
	return recs
}

func firstRef(r *record) string {
	if len(r.refs) == 0 {
		return "~" // digest-only images sort last
	}
	return r.refs[0]
}

func (s *Store) readBlob(dgst string) ([]byte, error) {
	if err := checkDigest(dgst); err != nil {
		return nil, err
	}
	f, err := os.Open(s.blobPath(dgst))
	if err != nil {
		return nil, err
	}
	defer f.Close()
	return readAllMax(f, maxMetaBytes)
}

func readAllMax(r io.Reader, max int64) ([]byte, error) {
	b, err := io.ReadAll(io.LimitReader(r, max+1))
	if err != nil {
		return nil, err
	}
	if int64(len(b)) > max {
		return nil, fmt.Errorf("larger than %d bytes", max)
	}
	return b, nil
}

func writeFileAtomic(name string, b []byte) error {
	tmp := name + ".tmp"
	f, err := os.OpenFile(tmp, os.O_WRONLY|os.O_CREATE|os.O_TRUNC, 0o644)
	if err != nil {
		return err
	}
	if _, err := f.Write(b); err != nil {
		f.Close()
		os.Remove(tmp)
		return err
	}
	if err := f.Sync(); err != nil {
		f.Close()
		os.Remove(tmp)
		return err
	}
	if err := f.Close(); err != nil {
		os.Remove(tmp)
		return err
	}
	return os.Rename(tmp, name)
}

// newRecord parses a manifest and its config into an index record.
func newRecord(desc ocispec.Descriptor, mb, cb []byte) (*record, error) {
	md := string(desc.Digest)
	var m ocispec.Manifest
	if err := decodeMeta(mb, &m, "manifest"); err != nil {
		return nil, fmt.Errorf("manifest %s: %w", md, err)
	}
	if err := checkLayerCount(len(m.Layers), "manifest"); err != nil {
		return nil, fmt.Errorf("manifest %s: %w", md, err)
	}
	if m.SchemaVersion != 2 {
		return nil, fmt.Errorf("manifest %s: %w", md, errdefs.Invalid("manifest", "schemaVersion %d, want 2", m.SchemaVersion))
	}
	var c ocispec.Image
	if err := decodeMeta(cb, &c, "config"); err != nil {
		return nil, fmt.Errorf("manifest %s: config %s: %w", md, m.Config.Digest, err)
	}
	if len(c.RootFS.DiffIDs) != len(m.Layers) {
		return nil, fmt.Errorf("manifest %s: %w", md, errdefs.Invalid("config",
			"rootfs.diff_ids lists %d layers, manifest %d", len(c.RootFS.DiffIDs), len(m.Layers)))
	}
	r := &record{digest: md, config: c, configD: string(m.Config.Digest), manifest: desc}
	r.blobs = append(r.blobs, md, string(m.Config.Digest))
	for i, l := range m.Layers {
		if err := checkDigest(string(l.Digest)); err != nil {
			return nil, fmt.Errorf("manifest %s: layer %d: %w", md, i, err)
		}
		if err := checkDigest(string(c.RootFS.DiffIDs[i])); err != nil {
			return nil, fmt.Errorf("manifest %s: diff_ids[%d]: %w", md, i, err)
		}
		r.blobs = append(r.blobs, string(l.Digest))
		r.diffIDs = append(r.diffIDs, string(c.RootFS.DiffIDs[i]))
		r.size += l.Size
	}
	return r, nil
}

// configDigest pulls the config digest out of a manifest ("" if none).
func configDigest(mb []byte) string {
	var m ocispec.Manifest
	if json.Unmarshal(mb, &m) != nil {
		return ""
	}
	return string(m.Config.Digest)
}

func digestOf(b []byte) string {
	sum := sha256.Sum256(b)
	return "sha256:" + hex.EncodeToString(sum[:])
}

// checkDigest accepts only "sha256:" and 64 lower-case hex digits, which
// also keeps digests safe to use as file names.
func checkDigest(d string) error {
	h, ok := strings.CutPrefix(d, "sha256:")
	if !ok || len(h) != 64 || !hexRE().MatchString(h) {
		return errdefs.Invalid("digest", "%q is not a sha256 digest", d)
	}
	return nil
}
