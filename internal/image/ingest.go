package image

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"slices"
	"strings"

	digest "github.com/opencontainers/go-digest"
	ocispec "github.com/opencontainers/image-spec/specs-go/v1"

	"github.com/shoal-run/shoal/internal/errdefs"
)

const (
	mediaTypeDockerManifest = "application/vnd.docker.distribution.manifest.v2+json"
	mediaTypeDockerList     = "application/vnd.docker.distribution.manifest.list.v2+json"
	mediaTypeDockerConfig   = "application/vnd.docker.container.image.v1+json"
	mediaTypeDockerLayer    = "application/vnd.docker.image.rootfs.diff.tar.gzip"
	mediaTypeDockerForeign  = "application/vnd.docker.image.rootfs.foreign.diff.tar.gzip"
)

var layerTypes = map[string]bool{
	ocispec.MediaTypeImageLayer:                     true,
	ocispec.MediaTypeImageLayerGzip:                 true,
	ocispec.MediaTypeImageLayerNonDistributable:     true, //nolint:staticcheck // still found in the wild
	ocispec.MediaTypeImageLayerNonDistributableGzip: true, //nolint:staticcheck
	mediaTypeDockerLayer:                            true,
	mediaTypeDockerForeign:                          true,
	"application/vnd.docker.image.rootfs.diff.tar":  true,
}

// ingest is one write transaction: blobs and snapshots are staged in a
// private directory under tmp/ and moved into the store by commit. close
// removes whatever was not committed.
type ingest struct {
	s      *Store
	dir    string
	staged map[string]bool   // blob digest -> staged under dir/blobs
	snaps  map[string]string // diff ID -> staged snapshot directory
	// verified maps layer blob digests to the diff ID their content has.
	verified map[string]string
	pinned   []string
	images   []*pending
}

type pending struct {
	rec  *record
	refs []string
}

func (s *Store) newIngest() (*ingest, error) {
	dir, err := os.MkdirTemp(s.tmpDir(), "ingest-")
	if err != nil {
		return nil, err
	}
	if err := os.Mkdir(filepath.Join(dir, "blobs"), 0o755); err != nil {
		os.RemoveAll(dir)
		return nil, err
	}
	return &ingest{s: s, dir: dir, staged: map[string]bool{}, snaps: map[string]string{}, verified: map[string]string{}}, nil
}

func (in *ingest) close() {
	in.s.mu.Lock()
	for _, p := range in.pinned {
		if in.s.pins[p]--; in.s.pins[p] <= 0 {
			delete(in.s.pins, p)
		}
	}
	in.s.mu.Unlock()
	in.pinned = nil
	if err := os.RemoveAll(in.dir); err != nil {
		in.s.log.Warn("image store: removing staging directory", "dir", in.dir, "err", err)
	}
}

// pinIfStored pins a blob digest or diff ID against garbage collection and
// reports whether the store already holds it at path.
func (in *ingest) pinIfStored(key, path string) bool {
	in.s.mu.Lock()
	defer in.s.mu.Unlock()
	if _, err := os.Lstat(path); err != nil {
		return false
	}
	in.s.pins[key]++
	in.pinned = append(in.pinned, key)
	return true
}

// hasBlob reports whether the blob is staged or stored (and pins it then).
func (in *ingest) hasBlob(dgst string) bool {
	return in.staged[dgst] || in.pinIfStored(dgst, in.s.blobPath(dgst))
}

// putBlob stages the content of r, checking it against want (digest and
// size; "" and -1 when unknown), and returns its digest and size.
func (in *ingest) putBlob(r io.Reader, want string, wantSize, max int64) (string, int64, error) {
	f, err := os.CreateTemp(filepath.Join(in.dir, "blobs"), "in-")
	if err != nil {
		return "", 0, err
	}
	defer f.Close()
	h := sha256.New()
	n, err := io.Copy(io.MultiWriter(f, h), io.LimitReader(r, max+1))
	if err != nil {
		return "", 0, err
	}
	if n > max {
		return "", 0, fmt.Errorf("blob larger than %d bytes", max)
	}
	got := "sha256:" + hex.EncodeToString(h.Sum(nil))
	if want != "" && got != want {
		return "", 0, fmt.Errorf("blob %s: digest mismatch: content hashes to %s", want, got)
	}
	if wantSize >= 0 && n != wantSize {
		return "", 0, fmt.Errorf("blob %s: size mismatch: descriptor says %d, content has %d", got, wantSize, n)
	}
	if err := f.Close(); err != nil {
		return "", 0, err
	}
	if err := os.Rename(f.Name(), in.stagedPath(got)); err != nil {
		return "", 0, err
	}
	in.staged[got] = true
	return got, n, nil
}

func (in *ingest) stagedPath(dgst string) string {
	return filepath.Join(in.dir, "blobs", strings.TrimPrefix(dgst, "sha256:"))
}

func (in *ingest) blobPath(dgst string) string {
	if in.staged[dgst] {
		return in.stagedPath(dgst)
	}
	return in.s.blobPath(dgst)
}

func (in *ingest) readMeta(dgst string) ([]byte, error) {
	f, err := os.Open(in.blobPath(dgst))
	if err != nil {
		return nil, err
	}
	defer f.Close()
	return readAllMax(f, maxMetaBytes)
}

// addImage checks a manifest whose blobs are all staged or stored, unpacks
// its missing snapshots, and queues it for commit under refs.
func (in *ingest) addImage(ctx context.Context, mb []byte, mediaType string, refs []string) error {
	md := digestOf(mb)
	if !in.hasBlob(md) {
		if _, _, err := in.putBlob(bytes.NewReader(mb), md, -1, maxMetaBytes); err != nil {
			return err
		}
	}
	var m ocispec.Manifest
	if err := json.Unmarshal(mb, &m); err != nil {
		return fmt.Errorf("manifest %s: %w", md, errdefs.Invalid("manifest", "%v", err))
	}
	if mediaType == "" {
		mediaType = m.MediaType
	}
	if mediaType == "" {
		mediaType = ocispec.MediaTypeImageManifest
	}
	if err := checkDigest(string(m.Config.Digest)); err != nil {
		return fmt.Errorf("manifest %s: config: %w", md, err)
	}
	if !in.hasBlob(string(m.Config.Digest)) {
		return fmt.Errorf("manifest %s: config blob %s: %w", md, m.Config.Digest, errdefs.ErrNotFound)
	}
	cb, err := in.readMeta(string(m.Config.Digest))
	if err != nil {
		return fmt.Errorf("manifest %s: config: %w", md, err)
	}
	desc := ocispec.Descriptor{MediaType: mediaType, Digest: digest.Digest(md), Size: int64(len(mb))}
	rec, err := newRecord(desc, mb, cb)
	if err != nil {
		return err
	}
	for i, l := range m.Layers {
		if err := in.addLayer(ctx, l, rec.diffIDs[i]); err != nil {
			return fmt.Errorf("layer %s: %w", l.Digest, err)
		}
	}
	in.images = append(in.images, &pending{rec: rec, refs: refs})
	return nil
}

// addLayer makes sure the snapshot for diffID exists, unpacking the layer
// blob described by l when it does not.
func (in *ingest) addLayer(ctx context.Context, l ocispec.Descriptor, diffID string) error {
	if !layerTypes[l.MediaType] {
		return errdefs.Invalid("layer", "unsupported media type %q", l.MediaType)
	}
	if !in.hasBlob(string(l.Digest)) {
		return fmt.Errorf("blob: %w", errdefs.ErrNotFound)
	}
	known := in.verified[string(l.Digest)]
	if known == "" {
		known = in.s.knownDiffID(string(l.Digest))
	}
	if known != "" && known != diffID {
		return fmt.Errorf("diff ID mismatch: content is %s, config says %s", known, diffID)
	}
	_, staged := in.snaps[diffID]
	if staged || in.pinIfStored(diffID, in.s.snapPath(diffID)) {
		if known == "" {
			// The snapshot exists but this blob was never checked against it.
			if err := in.checkDiffID(string(l.Digest), diffID); err != nil {
				return err
			}
		}
		return nil
	}
	f, err := os.Open(in.blobPath(string(l.Digest)))
	if err != nil {
		return err
	}
	defer f.Close()
	dst := filepath.Join(in.dir, "snap-"+strings.TrimPrefix(diffID, "sha256:"))
	// The snapshot's own top keeps a container root's usual mode (a layer's
	// "." entry may change it); snapshots/ above it is what shuts others out.
	if err := os.Mkdir(dst, 0o755); err != nil {
		return err
	}
	res, err := unpackLayer(ctx, f, dst, in.s.limits)
	if err != nil {
		return err
	}
	if res.DiffID != diffID {
		return fmt.Errorf("diff ID mismatch: content is %s, config says %s", res.DiffID, diffID)
	}
	in.snaps[diffID] = dst
	in.verified[string(l.Digest)] = diffID
	in.s.log.Debug("image store: layer unpacked", "digest", l.Digest, "diffID", diffID, "bytes", res.Size, "entries", res.Entries)
	return nil
}

// checkDiffID hashes the uncompressed content of a layer blob.
func (in *ingest) checkDiffID(layer, diffID string) error {
	f, err := os.Open(in.blobPath(layer))
	if err != nil {
		return err
	}
	defer f.Close()
	r, err := decompressed(f)
	if err != nil {
		return err
	}
	h := sha256.New()
	cnt := &limitCounter{r: r, h: h, max: in.s.limits.MaxLayerBytes}
	if _, err := io.Copy(io.Discard, cnt); err != nil {
		if cnt.over {
			return fmt.Errorf("layer exceeds the limit of %d uncompressed bytes", in.s.limits.MaxLayerBytes)
		}
		return err
	}
	if got := "sha256:" + hex.EncodeToString(h.Sum(nil)); got != diffID {
		return fmt.Errorf("diff ID mismatch: content is %s, config says %s", got, diffID)
	}
	in.verified[layer] = diffID
	return nil
}

// knownDiffID returns the diff ID a stored image pairs with a layer blob.
func (s *Store) knownDiffID(layer string) string {
	s.mu.RLock()
	defer s.mu.RUnlock()
	for _, r := range s.byDigest {
		for i, b := range r.blobs[2:] {
			if b == layer {
				return r.diffIDs[i]
			}
		}
	}
	return ""
}

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
	return out, nil
}

// newRecord parses a manifest and its config into an index record.
func newRecord(desc ocispec.Descriptor, mb, cb []byte) (*record, error) {
	md := string(desc.Digest)
	var m ocispec.Manifest
	if err := json.Unmarshal(mb, &m); err != nil {
		return nil, fmt.Errorf("manifest %s: %w", md, errdefs.Invalid("manifest", "%v", err))
	}
	if m.SchemaVersion != 2 {
		return nil, fmt.Errorf("manifest %s: %w", md, errdefs.Invalid("manifest", "schemaVersion %d, want 2", m.SchemaVersion))
	}
	var c ocispec.Image
	if err := json.Unmarshal(cb, &c); err != nil {
		return nil, fmt.Errorf("manifest %s: config %s: %w", md, m.Config.Digest, errdefs.Invalid("config", "%v", err))
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
