package image

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"time"

	ocispec "github.com/opencontainers/image-spec/specs-go/v1"
	"golang.org/x/sys/unix"

	"github.com/shoal-run/shoal/internal/errdefs"
)

// Limits bound what one layer may hold once uncompressed.
type Limits struct {
	MaxLayerBytes int64 // uncompressed bytes per layer
	MaxEntries    int   // tar entries per layer
	MaxFileBytes  int64 // bytes of one file
}

// DefaultLimits are used for any Limits field left zero.
var DefaultLimits = Limits{
	MaxLayerBytes: 8 << 30,
	MaxEntries:    1 << 20,
	MaxFileBytes:  4 << 30,
}

// maxMetaBytes bounds a manifest, config or index read into memory.
const maxMetaBytes = 16 << 20

// Option configures Open.
type Option func(*Store)

// WithLimits sets the unpacking limits; zero fields keep their defaults.
func WithLimits(l Limits) Option {
	return func(s *Store) {
		if l.MaxLayerBytes > 0 {
			s.limits.MaxLayerBytes = l.MaxLayerBytes
		}
		if l.MaxEntries > 0 {
			s.limits.MaxEntries = l.MaxEntries
		}
		if l.MaxFileBytes > 0 {
			s.limits.MaxFileBytes = l.MaxFileBytes
		}
	}
}

// WithLogger sets the logger.
func WithLogger(l *slog.Logger) Option { return func(s *Store) { s.log = l } }

// Image is one stored image as seen under one reference.
type Image struct {
	Ref     string              // "name:tag", or "" for an image known by digest only
	Digest  string              // manifest digest "sha256:..."
	ID      string              // config digest
	Config  ocispec.ImageConfig // entrypoint, cmd, env, workdir, ports, user...
	Layers  []string            // snapshot directories, bottom first
	Size    int64               // compressed bytes of the layers
	Created time.Time
}

// record is the in-memory index entry of one manifest.
type record struct {
	digest   string
	config   ocispec.Image
	configD  string
	blobs    []string // manifest, config and layer digests
	diffIDs  []string
	size     int64
	refs     []string // sorted full references
	manifest ocispec.Descriptor
}

// Store is the image store rooted at one directory. One process owns a root:
// Open takes an exclusive flock on it. A Store is safe for concurrent use.
type Store struct {
	root   string
	limits Limits
	log    *slog.Logger
	lock   *os.File
	// foreign is set when index.json lists entries of other types; their
	// blobs are then never swept.
	foreign      bool
	foreignDescs []ocispec.Descriptor // written back to index.json as found

	mu       sync.RWMutex
	byDigest map[string]*record
	byRef    map[string]*record
	pins     map[string]int // blob digests and diff IDs in use by unfinished writes
}

// Open opens (creating if needed) the store at root, loads its index, and
// clears what an interrupted write left behind.
func Open(root string, opts ...Option) (*Store, error) {
	abs, err := filepath.Abs(root)
	if err != nil {
		return nil, fmt.Errorf("image store %q: %w", root, err)
	}
	s := &Store{
		root:     abs,
		limits:   DefaultLimits,
		log:      slog.Default(),
		byDigest: map[string]*record{},
		byRef:    map[string]*record{},
		pins:     map[string]int{},
	}
	for _, o := range opts {
		o(s)
	}
	if err := s.makeDirs(); err != nil {
		return nil, fmt.Errorf("image store %q: %w", abs, err)
	}
	lock, err := os.OpenFile(filepath.Join(abs, ".lock"), os.O_RDWR|os.O_CREATE, 0o600)
	if err != nil {
		return nil, fmt.Errorf("image store %q: %w", abs, err)
	}
	if err := unix.Flock(int(lock.Fd()), unix.LOCK_EX|unix.LOCK_NB); err != nil {
		lock.Close()
		return nil, fmt.Errorf("image store %q is in use by another process: %w", abs, errdefs.ErrUnavailable)
	}
	s.lock = lock
	if err := s.init(); err != nil {
		lock.Close()
		return nil, fmt.Errorf("image store %q: %w", abs, err)
	}
	return s, nil
}

// makeDirs creates the root and its blobs/, snapshots/ and tmp/ as 0700, and
// narrows them to 0700 where an older store left them open. Snapshots hold
// untrusted images with their own modes, setuid binaries among them; only
// the closed parents keep other users of the machine from reaching them.
func (s *Store) makeDirs() error {
	for _, d := range []string{s.root, filepath.Join(s.root, "blobs"), s.blobDir(), s.snapDir(), s.tmpDir()} {
		if err := os.MkdirAll(d, 0o700); err != nil {
			return err
		}
		fi, err := os.Stat(d)
		if err != nil {
			return err
		}
		if !fi.IsDir() {
			return fmt.Errorf("%s is not a directory", d)
		}
		if fi.Mode().Perm() != 0o700 {
			if err := os.Chmod(d, 0o700); err != nil {
				return err
			}
		}
	}
	return nil
}

// Close releases the store's lock on its root.
func (s *Store) Close() error {
	if s.lock == nil {
		return nil
	}
	err := s.lock.Close()
	s.lock = nil
	return err
}

// Root is the store's directory, an OCI image layout.
func (s *Store) Root() string { return s.root }

func (s *Store) blobDir() string { return filepath.Join(s.root, "blobs", "sha256") }
func (s *Store) snapDir() string { return filepath.Join(s.root, "snapshots") }
func (s *Store) tmpDir() string  { return filepath.Join(s.root, "tmp") }

func (s *Store) blobPath(dgst string) string {
	return filepath.Join(s.blobDir(), strings.TrimPrefix(dgst, "sha256:"))
}

func (s *Store) snapPath(diffID string) string {
	return filepath.Join(s.snapDir(), strings.TrimPrefix(diffID, "sha256:"))
}

func (s *Store) init() error {
	ents, err := os.ReadDir(s.tmpDir())
	if err != nil {
		return err
	}
	for _, e := range ents {
		if err := os.RemoveAll(filepath.Join(s.tmpDir(), e.Name())); err != nil {
			return err
		}
	}
	layoutFile := filepath.Join(s.root, ocispec.ImageLayoutFile)
	if _, err := os.Stat(layoutFile); errors.Is(err, os.ErrNotExist) {
		b, _ := json.Marshal(ocispec.ImageLayout{Version: ocispec.ImageLayoutVersion})
		if err := writeFileAtomic(layoutFile, b); err != nil {
			return err
		}
	}
	idx, err := s.readIndex()
	if err != nil {
		return err
	}
	for _, d := range idx.Manifests {
		if d.MediaType != ocispec.MediaTypeImageManifest && d.MediaType != mediaTypeDockerManifest {
			s.log.Warn("image store: skipping index entry of unknown type", "digest", d.Digest, "mediaType", d.MediaType)
			s.foreign = true
			s.foreignDescs = append(s.foreignDescs, d)
			continue
		}
		rec := s.byDigest[string(d.Digest)]
		if rec == nil {
			var err error
			if rec, err = s.loadRecord(d); err != nil {
				// A damaged entry must not keep the store from opening; it
				// is dropped from index.json at the next write.
				s.log.Error("image store: dropping unreadable image", "digest", d.Digest, "err", err)
				continue
			}
			s.byDigest[rec.digest] = rec
		}
		if ref := d.Annotations[ocispec.AnnotationRefName]; ref != "" {
			rec.refs = append(rec.refs, ref)
			slices.Sort(rec.refs)
			s.byRef[ref] = rec
		}
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.gcLocked(nil)
}

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
