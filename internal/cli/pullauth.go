package cli

import (
	"context"
	"crypto/x509"
	"encoding/base64"
	"encoding/pem"
	"fmt"
	"os"
	"strings"

	"github.com/google/go-containerregistry/pkg/authn"
	"github.com/google/go-containerregistry/pkg/name"

	"github.com/shoal-run/shoal/internal/api/types"
	"github.com/shoal-run/shoal/internal/image"
)

// pullAuth is what `shoal image pull` sends the registry: --creds,
// --creds-file, else what this user's auth files hold for ref's registry
// (nil: none, the daemon then reads its own host's).
func pullAuth(ctx context.Context, ref, creds, credsFile string) (*types.RegistryAuth, error) {
	switch {
	case creds != "" && credsFile != "":
		return nil, usageErrorf("--creds and --creds-file: give one of them")
	case creds != "":
		return parseCreds("--creds", creds)
	case credsFile != "":
		b, err := os.ReadFile(credsFile)
		if err != nil {
			return nil, usageErrorf("--creds-file %s: cannot read: %v", credsFile, unwrapPathErr(err))
		}
		line, _, _ := strings.Cut(string(b), "\n")
		return parseCreds("--creds-file "+credsFile, strings.TrimSuffix(line, "\r"))
	}
	r, err := name.ParseReference(ref)
	if err != nil {
		return nil, nil // the daemon names what is wrong with ref
	}
	a, err := authn.Resolve(ctx, image.Keychain(), r.Context())
	if err != nil {
		return nil, fmt.Errorf("credentials for %s: %w", r.Context().RegistryStr(), err)
	}
	if a == authn.Anonymous {
		return nil, nil
	}
	c, err := authn.Authorization(ctx, a)
	if err != nil {
		return nil, fmt.Errorf("credentials for %s: %w", r.Context().RegistryStr(), err)
	}
	out := &types.RegistryAuth{Username: c.Username, Password: c.Password, IdentityToken: c.IdentityToken, RegistryToken: c.RegistryToken}
	if out.Username == "" && c.Auth != "" {
		if b, err := base64.StdEncoding.DecodeString(c.Auth); err == nil {
			out.Username, out.Password, _ = strings.Cut(string(b), ":")
		}
	}
	return out, nil
}

// parseCreds splits "USER:PASSWORD"; the error never shows the password.
func parseCreds(flag, s string) (*types.RegistryAuth, error) {
	user, pass, ok := strings.Cut(s, ":")
	if !ok || user == "" || pass == "" {
		return nil, usageErrorf("%s: must be USER:PASSWORD", flag)
	}
	return &types.RegistryAuth{Username: user, Password: pass}, nil
}

// readCA reads a PEM file of CA certificates for --ca-file.
func readCA(p string) (string, error) {
	b, err := os.ReadFile(p)
	if err != nil {
		return "", usageErrorf("--ca-file %s: cannot read: %v", p, unwrapPathErr(err))
	}
	rest, n := b, 0
	for {
		var blk *pem.Block
		blk, rest = pem.Decode(rest)
		if blk == nil {
			break
		}
		if blk.Type != "CERTIFICATE" {
			continue
		}
		if _, err := x509.ParseCertificate(blk.Bytes); err != nil {
			return "", usageErrorf("--ca-file %s: %v", p, err)
		}
		n++
	}
	if n == 0 {
		return "", usageErrorf("--ca-file %s: no PEM certificate in it", p)
	}
	return string(b), nil
}
