package image

import (
	"fmt"
	"os"

	"github.com/shoal-run/shoal/internal/errdefs"
)

// Manifest returns the manifest of the image whose manifest digest is
// dgst, as stored (the bytes that hash to dgst), and its media type: what
// a registry serves another node that pulls the image by digest.
func (s *Store) Manifest(dgst string) ([]byte, string, error) {
	if err := checkDigest(dgst); err != nil {
		return nil, "", err
	}
	s.mu.RLock()
	r := s.byDigest[dgst]
	s.mu.RUnlock()
	if r == nil {
		return nil, "", fmt.Errorf("manifest %s: %w", dgst, errdefs.ErrNotFound)
	}
	b, err := s.readBlob(dgst)
	if err != nil {
		return nil, "", fmt.Errorf("manifest %s: %w", dgst, err)
	}
	return b, r.manifest.MediaType, nil
}

// OpenBlob opens a blob (a manifest, config or layer, as stored) that one
// of the store's images uses; any other digest is not found, so nothing
// but images' parts is served. The file stays readable if the image is
// removed meanwhile.
func (s *Store) OpenBlob(dgst string) (*os.File, error) {
	if err := checkDigest(dgst); err != nil {
		return nil, err
	}
	s.mu.RLock()
	defer s.mu.RUnlock()
	used := false
	for _, r := range s.byDigest {
		for _, b := range r.blobs {
			if b == dgst {
				used = true
				break
			}
		}
		if used {
			break
		}
	}
	if !used {
		return nil, fmt.Errorf("blob %s: %w", dgst, errdefs.ErrNotFound)
	}
	f, err := os.Open(s.blobPath(dgst))
	if err != nil {
		return nil, fmt.Errorf("blob %s: %w", dgst, err)
	}
	return f, nil
}
