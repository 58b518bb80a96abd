package acme

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strings"
	"time"

	"github.com/shoal-run/shoal/internal/errdefs"
	"github.com/shoal-run/shoal/internal/manifest"
)

// OnDemand is the operator's word on names a TLS handshake asks a
// certificate for that no app claims (Caddy's on_demand_tls): a name in
// Allow ("shop.example.test", or "*.example.test" for any one label
// under it), or one the Ask URL answers 200 for (GET Ask?domain=NAME).
// Without either, no certificate is ordered on a handshake, so strangers
// cannot make shoal order certificates for any name pointed at it.
type OnDemand struct {
	Allow []string
	Ask   string
	// Client asks Ask (default: a client with a 5 s timeout).
	Client *http.Client
}

// Enabled reports whether any name may be ordered on demand.
func (o OnDemand) Enabled() bool { return len(o.Allow) > 0 || o.Ask != "" }

// Check tells why name may not be ordered on demand (nil: it may).
func (o OnDemand) Check(ctx context.Context, name string) error {
	name = strings.ToLower(strings.TrimSuffix(name, "."))
	if err := manifest.CheckDomain(name); err != nil {
		return errdefs.Invalid("domain", "%v", err)
	}
	for _, a := range o.Allow {
		if a == name || (strings.HasPrefix(a, "*.") && wildcardMatch(a[1:], name)) {
			return nil
		}
	}
	if o.Ask == "" {
		return fmt.Errorf("%s: not allowed for certificates on demand (--acme-on-demand-allow, --acme-on-demand-ask): %w", name, errdefs.ErrInvalid)
	}
	u, err := url.Parse(o.Ask)
	if err != nil {
		return fmt.Errorf("on-demand ask URL %q: %w", o.Ask, err)
	}
	q := u.Query()
	q.Set("domain", name)
	u.RawQuery = q.Encode()
	c := o.Client
	if c == nil {
		c = &http.Client{Timeout: 5 * time.Second}
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, u.String(), nil)
	if err != nil {
		return err
	}
	resp, err := c.Do(req)
	if err != nil {
		return fmt.Errorf("%s: the on-demand ask URL did not answer: %w", name, err)
	}
	io.Copy(io.Discard, io.LimitReader(resp.Body, 4096))
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return fmt.Errorf("%s: the on-demand ask URL answered %s: %w", name, resp.Status, errdefs.ErrInvalid)
	}
	return nil
}
