package image

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"

	ocispec "github.com/opencontainers/image-spec/specs-go/v1"

	"github.com/shoal-run/shoal/internal/errdefs"
)

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
	if res.DevSkipped > 0 {
		in.note(fmt.Sprintf("layer %s: %d device nodes under dev/ skipped (the runtime makes /dev)", l.Digest, res.DevSkipped))
	}
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
