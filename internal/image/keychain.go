package image

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strconv"

	"github.com/docker/cli/cli/config"
	"github.com/docker/cli/cli/config/types"
	"github.com/google/go-containerregistry/pkg/authn"
	"github.com/google/go-containerregistry/pkg/name"
)

// AuthFiles are the registry auth files Keychain reads, in order, in this
// process's environment: $REGISTRY_AUTH_FILE, containers' auth.json
// (${XDG_RUNTIME_DIR}/containers/auth.json, /run/containers/<uid>/auth.json,
// ${XDG_CONFIG_HOME:-~/.config}/containers/auth.json), then Docker's
// ~/.docker/config.json (or $DOCKER_CONFIG/config.json). A file that does
// not exist is passed over.
func AuthFiles() []string {
	var out []string
	if p := os.Getenv("REGISTRY_AUTH_FILE"); p != "" {
		out = append(out, p)
	}
	if d := os.Getenv("XDG_RUNTIME_DIR"); d != "" {
		out = append(out, filepath.Join(d, "containers", "auth.json"))
	}
	out = append(out, filepath.Join("/run/containers", strconv.Itoa(os.Getuid()), "auth.json"))
	home, _ := os.UserHomeDir()
	cfg := os.Getenv("XDG_CONFIG_HOME")
	if cfg == "" && home != "" {
		cfg = filepath.Join(home, ".config")
	}
	if cfg != "" {
		out = append(out, filepath.Join(cfg, "containers", "auth.json"))
	}
	if d := os.Getenv("DOCKER_CONFIG"); d != "" {
		out = append(out, filepath.Join(d, "config.json"))
	} else if home != "" {
		out = append(out, filepath.Join(home, ".docker", "config.json"))
	}
	return out
}

// Keychain finds a registry's credentials the way podman and docker do:
// in the first of AuthFiles that has an entry for the repository or its
// registry, credential helpers ("credHelpers", "credsStore") included.
// Nothing found is authn.Anonymous.
func Keychain() authn.Keychain {
	var kcs []authn.Keychain
	for _, p := range AuthFiles() {
		kcs = append(kcs, authFile(p))
	}
	return authn.NewMultiKeychain(kcs...)
}

// authFile is one auth.json or Docker config.json as a keychain.
type authFile string

func (f authFile) Resolve(r authn.Resource) (authn.Authenticator, error) {
	return f.ResolveContext(context.Background(), r)
}

func (f authFile) ResolveContext(_ context.Context, r authn.Resource) (authn.Authenticator, error) {
	fh, err := os.Open(string(f))
	if errors.Is(err, fs.ErrNotExist) {
		return authn.Anonymous, nil
	}
	if err != nil {
		return nil, fmt.Errorf("registry auth file %s: %w", f, err)
	}
	defer fh.Close()
	cf, err := config.LoadFromReader(fh)
	if err != nil {
		return nil, fmt.Errorf("registry auth file %s: %w", f, err)
	}
	var empty types.AuthConfig
	for _, key := range []string{r.String(), r.RegistryStr()} {
		if key == name.DefaultRegistry {
			key = authn.DefaultAuthKey
		}
		c, err := cf.GetAuthConfig(key)
		if err != nil {
			return nil, fmt.Errorf("registry auth file %s: %s: %w", f, key, err)
		}
		c.ServerAddress = ""
		if c != empty {
			return authn.FromConfig(authn.AuthConfig{
				Username: c.Username, Password: c.Password, Auth: c.Auth,
				IdentityToken: c.IdentityToken, RegistryToken: c.RegistryToken,
			}), nil
		}
	}
	return authn.Anonymous, nil
}
