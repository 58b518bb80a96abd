package image

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"io"
	"os"
	"path/filepath"
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
	// notes say what was left out of the input (see Image.Notes).
	notes []string
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

// note records something the user should know about the input, and logs it.
func (in *ingest) note(msg string) {
	in.notes = append(in.notes, msg)
	in.s.log.Info("image store: " + msg)
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
	if err := decodeMeta(mb, &m, "manifest"); err != nil {
		return fmt.Errorf("manifest %s: %w", md, err)
	}
	if err := checkLayerCount(len(m.Layers), "manifest"); err != nil {
		return fmt.Errorf("manifest %s: %w", md, err)
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
