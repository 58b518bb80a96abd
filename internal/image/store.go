package image

import (
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
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
	// Notes say what an Import or Pull left out of its input (device
	// nodes under dev/); set only on the images those return.
	Notes []string
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
//
// Store's methods (about 27, most unexported path and index helpers) all
// work on one on-disk layout under one lock: the index, blobs and
// snapshots must change together for an import to be all or nothing, so
// they stay on one type, grouped by operation in files (build, import,
// pull, gc).
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
