package acme

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strings"
	"sync"
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
	// Max bounds the names wanted on demand at once (default
	// DefaultOnDemandMax); a name beyond it is refused.
	Max int
	// MaxFailures is how many orders in a row may fail before a name
	// wanted on demand is dropped (default DefaultOnDemandFailures).
	MaxFailures int
}

// Defaults of OnDemand's bounds, and how long the Ask URL's answer for a
// name (yes or no) is kept, so that a stranger's handshakes cannot hammer
// it.
const (
	DefaultOnDemandMax      = 100
	DefaultOnDemandFailures = 5
	askCacheFor             = 5 * time.Minute
	askCacheMax             = 10000
)

// askAnswer is the Ask URL's answer for a name (nil: yes), and when.
type askAnswer struct {
	err error
	at  time.Time
}

// askCache keeps the policy's answers for askCacheFor.
type askCache struct {
	mu sync.Mutex
	m  map[string]askAnswer
}

// check is o.Check(name), answered from the cache when the same name was
// answered less than askCacheFor ago. Only the policy's answers are kept,
// not an Ask URL that could not be reached.
func (c *askCache) check(ctx context.Context, o OnDemand, name string, now time.Time) error {
	c.mu.Lock()
	a, ok := c.m[name]
	c.mu.Unlock()
	if ok && now.Sub(a.at) < askCacheFor {
		return a.err
	}
	err := o.Check(ctx, name)
	if err != nil && !errdefs.IsInvalid(err) {
		return err
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.m == nil || len(c.m) >= askCacheMax {
		for n, a := range c.m {
			if now.Sub(a.at) >= askCacheFor {
				delete(c.m, n)
			}
		}
		if c.m == nil || len(c.m) >= askCacheMax {
			c.m = map[string]askAnswer{}
		}
	}
	c.m[name] = askAnswer{err: err, at: now}
	return err
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
