package image

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"strings"

	"github.com/BurntSushi/toml"
	"github.com/google/go-containerregistry/pkg/name"

	"github.com/shoal-run/shoal/internal/errdefs"
)

// DefaultRegistriesConf is where containers' tools (podman, skopeo,
// buildah) keep their registries' mirrors and locations.
const DefaultRegistriesConf = "/etc/containers/registries.conf"

// registriesConf is the part of registries.conf (version 2) a pull uses.
type registriesConf struct {
	Registries []registryConf `toml:"registry"`
}

type registryConf struct {
	Prefix             string       `toml:"prefix"`
	Location           string       `toml:"location"`
	Insecure           bool         `toml:"insecure"`
	Blocked            bool         `toml:"blocked"`
	MirrorByDigestOnly bool         `toml:"mirror-by-digest-only"`
	Mirrors            []mirrorConf `toml:"mirror"`
}

type mirrorConf struct {
	Location       string `toml:"location"`
	Insecure       bool   `toml:"insecure"`
	PullFromMirror string `toml:"pull-from-mirror"` // "all" (default), "digest-only", "tag-only"
}

// pullSource is one place to pull an image from.
type pullSource struct {
	ref      string
	insecure bool
	mirror   bool
}

// pullSources lists where ref is pulled from, the containers way: the
// [[registry]] whose prefix (its location when none) matches ref's
// repository longest gives its mirrors first, in order (those its
// mirror-by-digest-only or pull-from-mirror leave out for this kind of
// reference skipped), then its location; a blocked one is refused. With no
// file or no match, ref alone.
func pullSources(confPath, ref string) ([]pullSource, error) {
	own := []pullSource{{ref: ref}}
	b, err := os.ReadFile(confPath)
	if errors.Is(err, fs.ErrNotExist) {
		return own, nil
	}
	if err != nil {
		return nil, fmt.Errorf("registries: %w", err)
	}
	var conf registriesConf
	if _, err := toml.Decode(string(b), &conf); err != nil {
		return nil, fmt.Errorf("registries: %s: %w", confPath, err)
	}
	r, err := name.ParseReference(ref)
	if err != nil {
		return nil, errdefs.Invalid("reference", "%q: %v", ref, err)
	}
	registry := r.Context().RegistryStr()
	if registry == name.DefaultRegistry {
		registry = "docker.io"
	}
	repo := registry + "/" + r.Context().RepositoryStr()
	var best *registryConf
	bestPrefix := ""
	for i := range conf.Registries {
		c := &conf.Registries[i]
		p := strings.TrimSuffix(c.Prefix, "/")
		if p == "" {
			p = strings.TrimSuffix(c.Location, "/")
		}
		if p == "" || (repo != p && !strings.HasPrefix(repo, p+"/")) {
			continue
		}
		if len(p) > len(bestPrefix) {
			best, bestPrefix = c, p
		}
	}
	if best == nil {
		return own, nil
	}
	if best.Blocked {
		return nil, errdefs.Invalid("reference", "%q: registry %s is blocked in %s", ref, bestPrefix, confPath)
	}
	suffix := ":" + DefaultTag
	if d, ok := r.(name.Digest); ok {
		suffix = "@" + d.DigestStr()
	} else if tg, ok := r.(name.Tag); ok {
		suffix = ":" + tg.TagStr()
	}
	_, byDigest := r.(name.Digest)
	moved := func(loc string) string {
		return strings.TrimSuffix(loc, "/") + strings.TrimPrefix(repo, bestPrefix) + suffix
	}
	var out []pullSource
	for _, m := range best.Mirrors {
		switch {
		case m.Location == "":
		case !byDigest && (best.MirrorByDigestOnly || m.PullFromMirror == "digest-only"):
		case byDigest && m.PullFromMirror == "tag-only":
		default:
			out = append(out, pullSource{ref: moved(m.Location), insecure: m.Insecure, mirror: true})
		}
	}
	loc := best.Location
	if loc == "" {
		loc = bestPrefix
	}
	return append(out, pullSource{ref: moved(loc), insecure: best.Insecure}), nil
}
