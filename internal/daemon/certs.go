package daemon

import (
	"context"
	"errors"
	"fmt"
	"strings"

	"github.com/shoal-run/shoal/internal/api"
	"github.com/shoal-run/shoal/internal/api/types"
	"github.com/shoal-run/shoal/internal/certs"
	"github.com/shoal-run/shoal/internal/errdefs"
	"github.com/shoal-run/shoal/internal/manifest"
	"github.com/shoal-run/shoal/internal/route"
	"github.com/shoal-run/shoal/internal/store"
)

// certsAPI is the certificates as the API serves them: never a key out.
type certsAPI struct{ s *certs.Store }

func wireCert(c certs.Cert) types.Cert {
	return types.Cert{Domains: c.Domains, Source: c.Source, Issuer: c.Issuer, NotBefore: c.NotBefore, NotAfter: c.NotAfter,
		RenewedAt: c.RenewedAt, LastError: c.LastError, LastErrorAt: c.LastErrorAt, Pending: c.Pending()}
}

func (a certsAPI) List(ctx context.Context) ([]types.Cert, error) {
	list, err := a.s.ListInfo(ctx)
	if err != nil {
		return nil, err
	}
	out := make([]types.Cert, len(list))
	for i, c := range list {
		out[i] = wireCert(c)
	}
	return out, nil
}

// Add stores a certificate from files once certs.Check finds it can be
// served; it replaces the one of the same name.
func (a certsAPI) Add(ctx context.Context, req types.CertRequest) (types.Cert, error) {
	now := a.s.Now()
	c, err := certs.Check(req.Domain, []byte(req.CertPEM), []byte(req.KeyPEM), now)
	if err != nil {
		return types.Cert{}, err
	}
	c.RenewedAt = now
	if err := a.s.Put(ctx, c); err != nil {
		return types.Cert{}, err
	}
	return wireCert(c), nil
}

func (a certsAPI) Remove(ctx context.Context, domain string) error { return a.s.Delete(ctx, domain) }

// followCerts pushes the certificates in the store to the proxy process,
// the whole set at once and after every change, until ctx ends. Pending
// records (no certificate yet) are left out.
func (d *Daemon) followCerts(ctx context.Context) {
	d.certs.Follow(ctx, func(list []certs.Cert) {
		out := make([]route.Cert, 0, len(list))
		for _, c := range list {
			if !c.Pending() {
				out = append(out, route.Cert{Domains: c.Domains, CertPEM: c.CertPEM, KeyPEM: c.KeyPEM, OCSP: c.OCSP})
			}
		}
		d.plane.Client().SetCerts(out)
	}, func(err error) { d.log.Warn("certificates", "err", err) })
}

// appsWithDomains gives an app the domains its shoal.toml lists before it
// is deployed, each owned by one app at a time (store.ClaimDomains: of two
// deploys at once, one wins); it refuses one another app owns, naming the
// key and the owner, and gives back those the app no longer lists after
// the deploy, and all of them when the app is removed.
type appsWithDomains struct {
	api.Apps
	st store.Store
	// domain is the daemon's --domain: names equal to or under it are
	// <app>.<domain>, each app's own, never an app's domains.
	domain string
}

// checkDaemonDomain refuses a domain equal to or under base (--domain).
func checkDaemonDomain(domains []string, base string) error {
	base = strings.Trim(strings.ToLower(base), ".")
	if base == "" {
		return nil
	}
	for _, d := range domains {
		if d == base || strings.HasSuffix(d, "."+base) {
			return errdefs.Invalid("domains", "%s is under the daemon's --domain %s, where <app>.%s is app <app>'s host; an app cannot take it as its own domain", d, base, base)
		}
	}
	return nil
}

func (a appsWithDomains) Deploy(ctx context.Context, req types.DeployRequest) (types.App, error) {
	cfg, err := manifest.Parse([]byte(req.Manifest), "shoal.toml")
	if err != nil {
		// serving's own answer.
		return a.Apps.Deploy(ctx, req)
	}
	if err := checkDaemonDomain(cfg.Domains, a.domain); err != nil {
		return types.App{}, fmt.Errorf("shoal.toml: %w", err)
	}
	claimed, err := store.ClaimDomains(ctx, a.st, cfg.Name, cfg.Domains)
	if err != nil {
		var owned *store.DomainOwnedError
		if errors.As(err, &owned) {
			return types.App{}, fmt.Errorf("shoal.toml: %w", errdefs.Invalid("domains",
				"%s belongs to app %q; it must give it up (remove it from that app's domains and deploy it) first", owned.Domain, owned.Owner))
		}
		return types.App{}, err
	}
	app, err := a.Apps.Deploy(ctx, req)
	if err != nil {
		store.ReleaseClaimed(context.WithoutCancel(ctx), a.st, cfg.Name, claimed)
		return app, err
	}
	if err := store.ReleaseDomains(ctx, a.st, cfg.Name, cfg.Domains); err != nil {
		return app, err
	}
	return app, nil
}

// Activate passes the proxy's wake-up on.
func (a appsWithDomains) Activate(app string) {
	if w, ok := a.Apps.(interface{ Activate(app string) }); ok {
		w.Activate(app)
	}
}

func (a appsWithDomains) Remove(ctx context.Context, name string) error {
	if err := a.Apps.Remove(ctx, name); err != nil {
		return err
	}
	return store.ReleaseDomains(ctx, a.st, name, nil)
}
