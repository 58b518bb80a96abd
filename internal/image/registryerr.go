package image

import (
	"crypto/x509"
	"errors"
	"fmt"
	"net/http"
	"strings"

	"github.com/google/go-containerregistry/pkg/v1/remote/transport"

	"github.com/shoal-run/shoal/internal/errdefs"
)

// registryCtx is what a registry error is explained with.
type registryCtx struct {
	registry string // "host[:port]"
	repo     string
	user     string // the user whose credentials were sent; "" none
	token    bool   // a bearer token was sent (another shoal node)
	// noClientCert: the registry asked for a client certificate the pull
	// had not, and never answered over TLS.
	noClientCert bool
}

// credsHelp says how to give credentials to shoal image pull.
func credsHelp(registry string) string {
	return fmt.Sprintf("pass --creds USER:PASSWORD or --creds-file FILE to `shoal image pull`, or log in with `podman login %s` or `docker login %s` "+
		"(shoal reads $REGISTRY_AUTH_FILE, ${XDG_RUNTIME_DIR}/containers/auth.json and ~/.docker/config.json, credential helpers included)", registry, registry)
}

// err explains a registry's answer or a TLS failure in words: a 404 is
// errdefs.ErrNotFound, a 401 or 403 says whether credentials were missing
// or refused and how to give them, an unknown certificate authority says
// where its CA goes. The registry's own error details (a Go map once
// printed) are left out.
func (c registryCtx) err(err error) error {
	if err == nil {
		return nil
	}
	// TLS first: a loopback registry is also tried over plain HTTP, whose
	// answer (400) comes with the TLS failure.
	var ua x509.UnknownAuthorityError
	if errors.As(err, &ua) {
		return registryErrorf("registry %s: its certificate is signed by an authority this host does not know: "+
			"give the registry's CA with --ca-file FILE to `shoal image pull`, or put it in /etc/containers/certs.d/%s/ca.crt "+
			"(or /etc/docker/certs.d/%s/ca.crt) on the daemon's host", c.registry, c.registry, c.registry)
	}
	var he x509.HostnameError
	if errors.As(err, &he) {
		return registryErrorf("registry %s: its certificate is not for this name: %v", c.registry, he)
	}
	// The server's alert reaches the client as text only, and not always
	// (HTTP/2 may report only that the connection could not be
	// established): a registry that asked for a client certificate the
	// pull had not is told by the transport (clientCert).
	if msg := err.Error(); c.noClientCert || strings.Contains(msg, "tls: certificate required") || strings.Contains(msg, "tls: bad certificate") {
		return registryErrorf("registry %s wants a client certificate and refused the connection without one: "+
			"put client.cert and client.key in /etc/containers/certs.d/%s/ (or /etc/docker/certs.d/%s/) on the daemon's host",
			c.registry, c.registry, c.registry)
	}
	var te *transport.Error
	if errors.As(err, &te) {
		switch te.StatusCode {
		case http.StatusNotFound:
			what := c.repo
			if te.Request != nil {
				what = te.Request.URL.Path
			}
			return fmt.Errorf("registry %s: %s: %w (404%s)", c.registry, what, errdefs.ErrNotFound, diagnostics(te))
		case http.StatusUnauthorized:
			switch {
			case c.token:
				return registryErrorf("registry %s refused the token sent (401 Unauthorized%s)", c.registry, diagnostics(te))
			case c.user == "":
				return registryErrorf("registry %s wants credentials to pull %s and none were given (401 Unauthorized%s): %s",
					c.registry, c.repo, diagnostics(te), credsHelp(c.registry))
			}
			return registryErrorf("registry %s refused the credentials given for user %q (401 Unauthorized%s): check the user and password, or %s",
				c.registry, c.user, diagnostics(te), credsHelp(c.registry))
		case http.StatusForbidden:
			who := "a pull without credentials"
			if c.user != "" {
				who = fmt.Sprintf("user %q", c.user)
			}
			return registryErrorf("registry %s refused %s access to %s (403 Forbidden%s)", c.registry, who, c.repo, diagnostics(te))
		}
		return err
	}
	return err
}

// RegistryError is a registry's refusal that the user fixes by what they
// give the pull (credentials, a CA, a client certificate). It matches
// errdefs.ErrInvalid with errors.Is.
type RegistryError struct{ Msg string }

func (e *RegistryError) Error() string { return e.Msg }

// Is reports that a RegistryError is an ErrInvalid.
func (e *RegistryError) Is(target error) bool { return target == errdefs.ErrInvalid }

func registryErrorf(format string, args ...any) error {
	return &RegistryError{Msg: fmt.Sprintf(format, args...)}
}

// diagnostics renders a registry's error codes and messages, without their
// details.
func diagnostics(te *transport.Error) string {
	var parts []string
	for _, d := range te.Errors {
		s := string(d.Code)
		if d.Message != "" {
			s += ": " + d.Message
		}
		parts = append(parts, s)
	}
	if len(parts) == 0 {
		return ""
	}
	return "; " + strings.Join(parts, "; ")
}
