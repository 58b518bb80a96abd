package image

import (
	"bytes"
	"context"
	"fmt"
	"net/http"
	"runtime"
	"strings"

	"github.com/google/go-containerregistry/pkg/authn"
	"github.com/google/go-containerregistry/pkg/name"
	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/remote"
	ocispec "github.com/opencontainers/image-spec/specs-go/v1"

	"github.com/shoal-run/shoal/internal/errdefs"
)

// PullOptions tune Pull.
type PullOptions struct {
	Insecure bool   // allow plain http (loopback registries use it anyway)
	Platform string // "os/arch[/variant]"; default linux and this machine's arch
	// Token, if set, is sent to the registry as a bearer token (another
	// shoal node's registry takes the cluster secret).
	Token string
	// Auth, if set, is given to the registry (a user and password, or a
	// token); else Keychain, if set, is asked for the registry's
	// credentials (see Keychain); else the pull is anonymous.
	Auth     *authn.AuthConfig
	Keychain authn.Keychain
	// CA holds PEM certificates of authorities the registry's certificate
	// may be signed by, beside the system's and its certs.d folders'.
	CA []byte
	// CertsDirs hold a folder per registry host with its CAs and client
	// certificates (see DefaultCertsDirs, the default when nil).
	CertsDirs []string
	// RegistriesConf is containers' registries.conf whose [[registry]]
	// tables give mirrors, a new location, insecure or blocked
	// registries; "": DefaultRegistriesConf. A missing file is none.
	RegistriesConf string
	// Transport makes the requests; nil: go-containerregistry's default
	// with the TLS configuration of CA and CertsDirs.
	Transport http.RoundTripper
}

// Pull fetches ref ("registry/name:tag" or "registry/name@sha256:...") from
// an OCI registry, picking the platform's manifest from an index, and stores
// it under its "name:tag" (no reference for a digest pull). Every blob is
// checked against its digest; blobs the store holds are not fetched again.
func (s *Store) Pull(ctx context.Context, ref string, o PullOptions) (Image, error) {
	img, err := s.pull(ctx, ref, o)
	if err != nil {
		return Image{}, fmt.Errorf("pull %q: %w", ref, err)
	}
	return img, nil
}

func (s *Store) pull(ctx context.Context, ref string, o PullOptions) (Image, error) {
	var refs []string
	if !strings.Contains(ref, "@") {
		full, err := normalizeRef(ref)
		if err != nil {
			return Image{}, err
		}
		refs = []string{full}
	}
	if _, err := name.ParseReference(ref); err != nil {
		return Image{}, errdefs.Invalid("reference", "%q: %v", ref, err)
	}
	srcs := []pullSource{{ref: ref}}
	if o.Token == "" {
		conf := o.RegistriesConf
		if conf == "" {
			conf = DefaultRegistriesConf
		}
		var err error
		if srcs, err = pullSources(conf, ref); err != nil {
			return Image{}, err
		}
	}
	var mirrorErrs []string
	for _, src := range srcs {
		so := o
		so.Insecure = o.Insecure || src.insecure
		if src.mirror {
			so.Auth = nil // given for the registry named, not its mirror
			if so.Keychain == nil {
				so.Keychain = Keychain()
			}
		}
		img, err := s.pullFrom(ctx, src.ref, refs, so)
		if err == nil {
			if src.mirror {
				img.Notes = append(img.Notes, "pulled from the mirror "+src.ref)
			}
			return img, nil
		}
		if !src.mirror {
			if len(mirrorErrs) > 0 {
				return Image{}, fmt.Errorf("%w (mirrors tried first: %s)", err, strings.Join(mirrorErrs, "; "))
			}
			return Image{}, err
		}
		if ctx.Err() != nil {
			return Image{}, err
		}
		mirrorErrs = append(mirrorErrs, fmt.Sprintf("%s: %v", src.ref, err))
	}
	return Image{}, fmt.Errorf("every mirror failed and %s allows no other source: %s: %w", ref, strings.Join(mirrorErrs, "; "), errdefs.ErrNotFound)
}

// pullFrom pulls ref (the registry's or a mirror's) and stores it under refs.
func (s *Store) pullFrom(ctx context.Context, ref string, refs []string, o PullOptions) (Image, error) {
	var nopts []name.Option
	if o.Insecure {
		nopts = append(nopts, name.Insecure)
	}
	r, err := name.ParseReference(ref, nopts...)
	if err != nil {
		return Image{}, errdefs.Invalid("reference", "%q: %v", ref, err)
	}
	platform := o.Platform
	if platform == "" {
		platform = "linux/" + runtime.GOARCH
	}
	plat, err := v1.ParsePlatform(platform)
	if err != nil {
		return Image{}, errdefs.Invalid("platform", "%q: %v", platform, err)
	}
	ropts := []remote.Option{remote.WithContext(ctx), remote.WithPlatform(*plat)}
	rc := registryCtx{registry: r.Context().RegistryStr(), repo: r.Context().RepositoryStr()}
	auth, err := o.authenticator(ctx, r.Context(), &rc)
	if err != nil {
		return Image{}, err
	}
	ropts = append(ropts, remote.WithAuth(auth))
	tr := o.Transport
	if tr == nil {
		dirs := o.CertsDirs
		if dirs == nil {
			dirs = DefaultCertsDirs
		}
		t, err := newHostTLS(o.CA, dirs)
		if err != nil {
			return Image{}, err
		}
		defer t.closeIdle()
		tr = t
	}
	ropts = append(ropts, remote.WithTransport(tr))
	registryErr := rc.err
	if t, ok := tr.(*hostTLS); ok {
		registryErr = func(err error) error {
			rc := rc
			rc.noClientCert = t.noClientCert(rc.registry)
			return rc.err(err)
		}
	}
	desc, err := remote.Get(r, ropts...)
	if err != nil {
		return Image{}, registryErr(err)
	}
	img, err := desc.Image()
	if err != nil {
		return Image{}, registryErr(err)
	}
	in, err := s.newIngest()
	if err != nil {
		return Image{}, err
	}
	defer in.close()

	mb, err := img.RawManifest()
	if err != nil {
		return Image{}, registryErr(err)
	}
	// The layers are counted before any blob is fetched.
	var m ocispec.Manifest
	if err := decodeMeta(mb, &m, "manifest"); err != nil {
		return Image{}, err
	}
	if err := checkLayerCount(len(m.Layers), "manifest"); err != nil {
		return Image{}, err
	}
	md, err := img.Digest()
	if err != nil {
		return Image{}, err
	}
	mt, err := img.MediaType()
	if err != nil {
		return Image{}, err
	}
	if _, _, err := in.putBlob(bytes.NewReader(mb), md.String(), -1, maxMetaBytes); err != nil {
		return Image{}, fmt.Errorf("manifest: %w", err)
	}
	cn, err := img.ConfigName()
	if err != nil {
		return Image{}, registryErr(err)
	}
	if !in.hasBlob(cn.String()) {
		cb, err := img.RawConfigFile()
		if err != nil {
			return Image{}, registryErr(err)
		}
		if _, _, err := in.putBlob(bytes.NewReader(cb), cn.String(), -1, maxMetaBytes); err != nil {
			return Image{}, fmt.Errorf("config: %w", err)
		}
	}
	layers, err := img.Layers()
	if err != nil {
		return Image{}, registryErr(err)
	}
	for _, l := range layers {
		d, err := l.Digest()
		if err != nil {
			return Image{}, err
		}
		if in.hasBlob(d.String()) {
			continue
		}
		size, err := l.Size()
		if err != nil {
			return Image{}, registryErr(err)
		}
		rc, err := l.Compressed()
		if err != nil {
			return Image{}, fmt.Errorf("layer %s: %w", d, registryErr(err))
		}
		_, _, err = in.putBlob(rc, d.String(), size, s.limits.MaxLayerBytes)
		rc.Close()
		if err != nil {
			return Image{}, fmt.Errorf("layer %s: %w", d, registryErr(err))
		}
	}
	if err := in.addImage(ctx, mb, string(mt), refs); err != nil {
		return Image{}, err
	}
	imgs, err := in.commit()
	if err != nil {
		return Image{}, err
	}
	return imgs[0], nil
}

// authenticator picks what the registry is given: the token, the
// credentials given, or the keychain's for repo; rc learns who is sent.
func (o PullOptions) authenticator(ctx context.Context, repo name.Repository, rc *registryCtx) (authn.Authenticator, error) {
	switch {
	case o.Token != "":
		rc.token = true
		return &authn.Bearer{Token: o.Token}, nil
	case o.Auth != nil:
		rc.user = o.Auth.Username
		if rc.user == "" {
			rc.user = "(token)"
		}
		return authn.FromConfig(*o.Auth), nil
	case o.Keychain != nil:
		a, err := authn.Resolve(ctx, o.Keychain, repo)
		if err != nil {
			return nil, fmt.Errorf("credentials for %s: %w", repo.RegistryStr(), err)
		}
		if a != authn.Anonymous {
			c, err := authn.Authorization(ctx, a)
			if err != nil {
				return nil, fmt.Errorf("credentials for %s: %w", repo.RegistryStr(), err)
			}
			rc.user = c.Username
			if rc.user == "" {
				rc.user = "(token)"
			}
		}
		return a, nil
	}
	return authn.Anonymous, nil
}
