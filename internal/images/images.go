// Package images is the API's image service: the image store's images as
// API types (list, inspect, build, import, pull), and removal refused while
// a container still uses the image.
package images

import (
	"context"
	"fmt"
	"sort"

	"github.com/google/go-containerregistry/pkg/authn"

	"github.com/shoal-run/shoal/internal/api/types"
	"github.com/shoal-run/shoal/internal/errdefs"
	"github.com/shoal-run/shoal/internal/image"
)

// Service adapts the image store to the API.
type Service struct {
	s *image.Store
	// hold holds an image for its removal: it names a container still
	// using it (its layers are mounted, so it cannot be removed), or
	// returns release, called once the image is removed, until which no
	// container is made of it.
	hold Hold
}

// Hold holds image digest for its removal: user is a container still
// using it, else the caller removes the image, then calls release.
type Hold func(ctx context.Context, digest string) (user string, release func(), err error)

// New returns the service of store; hold, if not nil, holds an image for
// its removal.
func New(store *image.Store, hold Hold) *Service {
	return &Service{s: store, hold: hold}
}

func toAPIImage(i image.Image) types.Image {
	a := types.Image{
		Ref: i.Ref, Digest: i.Digest, ID: i.ID, Size: i.Size, Created: i.Created, Layers: len(i.Layers),
		Entrypoint: i.Config.Entrypoint, Cmd: i.Config.Cmd, Env: i.Config.Env, WorkingDir: i.Config.WorkingDir,
		Notes: i.Notes,
	}
	for p := range i.Config.ExposedPorts {
		a.Ports = append(a.Ports, p)
	}
	sort.Strings(a.Ports)
	return a
}

// List returns every image, by reference.
func (s *Service) List(ctx context.Context) ([]types.Image, error) {
	imgs, err := s.s.List(ctx)
	if err != nil {
		return nil, err
	}
	out := make([]types.Image, 0, len(imgs))
	for _, i := range imgs {
		out = append(out, toAPIImage(i))
	}
	sort.Slice(out, func(a, b int) bool { return out[a].Ref < out[b].Ref })
	return out, nil
}

// Get returns the image ref names.
func (s *Service) Get(ctx context.Context, ref string) (types.Image, error) {
	i, err := s.s.Get(ctx, ref)
	if err != nil {
		return types.Image{}, err
	}
	return toAPIImage(i), nil
}

// Build builds a one-layer image from a folder on the daemon's host.
func (s *Service) Build(ctx context.Context, req types.BuildRequest) (types.Image, error) {
	if req.Dir == "" {
		return types.Image{}, errdefs.Invalid("dir", "is required")
	}
	if req.Tag == "" {
		return types.Image{}, errdefs.Invalid("tag", "is required")
	}
	i, err := s.s.Build(ctx, req.Dir, image.BuildOptions{
		Tag: req.Tag, Entrypoint: req.Entrypoint, Cmd: req.Cmd, Env: req.Env, Workdir: req.Workdir, Ports: req.Ports,
	})
	if err != nil {
		return types.Image{}, fmt.Errorf("build %s: %w", req.Dir, err)
	}
	return toAPIImage(i), nil
}

// Import imports an OCI layout, docker-archive or rootfs tar.
func (s *Service) Import(ctx context.Context, req types.ImportRequest) ([]types.Image, error) {
	if req.Path == "" {
		return nil, errdefs.Invalid("path", "is required")
	}
	imgs, err := s.s.Import(ctx, req.Path, req.Tag)
	if err != nil {
		return nil, fmt.Errorf("import %s: %w", req.Path, err)
	}
	out := make([]types.Image, 0, len(imgs))
	for _, i := range imgs {
		out = append(out, toAPIImage(i))
	}
	return out, nil
}

// Pull pulls an image from an OCI registry with the credentials the
// request carries, else those this host's auth files hold for the
// registry (image.Keychain, read as the daemon's user).
func (s *Service) Pull(ctx context.Context, req types.PullRequest) (types.Image, error) {
	if req.Ref == "" {
		return types.Image{}, errdefs.Invalid("ref", "is required")
	}
	o := image.PullOptions{Insecure: req.Insecure, CA: []byte(req.CA)}
	if a := req.Auth; a != nil {
		o.Auth = &authn.AuthConfig{Username: a.Username, Password: a.Password, IdentityToken: a.IdentityToken, RegistryToken: a.RegistryToken}
	} else {
		o.Keychain = image.Keychain()
	}
	i, err := s.s.Pull(ctx, req.Ref, o)
	if err != nil {
		return types.Image{}, err // it names the reference
	}
	return toAPIImage(i), nil
}

// Remove removes image ref unless a container still uses it.
func (s *Service) Remove(ctx context.Context, ref string) error {
	img, err := s.s.Get(ctx, ref)
	if err != nil {
		return err
	}
	if s.hold != nil {
		id, release, err := s.hold(ctx, img.Digest)
		if err != nil {
			return err
		}
		if id != "" {
			return fmt.Errorf("image %q is used by container %s (remove it first with `shoal rm %s`): %w", ref, id, id, errdefs.ErrConflict)
		}
		defer release()
	}
	return s.s.Remove(ctx, ref)
}
