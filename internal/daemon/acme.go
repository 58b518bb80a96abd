package daemon

import (
	"context"
	"crypto/x509"
	"fmt"
	"net/url"
	"os"
	"strings"

	legolog "github.com/go-acme/lego/v5/log"

	"github.com/shoal-run/shoal/internal/acme"
	"github.com/shoal-run/shoal/internal/clock"
	"github.com/shoal-run/shoal/internal/errdefs"
	"github.com/shoal-run/shoal/internal/proxy"
	"github.com/shoal-run/shoal/internal/store"
)

// ACMEConfig turns on certificates from an ACME CA for apps' domains
// (internal/acme); off while CA is "".
type ACMEConfig struct {
	// CA is the directory URL (--acme-ca), e.g. Let's Encrypt's
	// https://acme-v02.api.letsencrypt.org/directory.
	CA string
	// Email is the account's contact (--acme-email).
	Email string
	// CARoot is a PEM file of roots trusted for the CA's API
	// (--acme-ca-root; "": the system's).
	CARoot string
	// Challenges are the types offered (--acme-challenges; default
	// http-01).
	Challenges []string
	// OnDemandAllow and OnDemandAsk allow certificates for names a TLS
	// handshake asks for that no app claims (--acme-on-demand-allow,
	// --acme-on-demand-ask).
	OnDemandAllow []string
	OnDemandAsk   string
}

func (c *ACMEConfig) validate(proxyOff bool) error {
	if c.CA == "" {
		for flag, set := range map[string]bool{"--acme-email": c.Email != "", "--acme-ca-root": c.CARoot != "",
			"--acme-challenges": len(c.Challenges) > 0, "--acme-on-demand-allow": len(c.OnDemandAllow) > 0,
			"--acme-on-demand-ask": c.OnDemandAsk != ""} {
			if set {
				return errdefs.Invalid(flag, "needs --acme-ca (ACME is off without it)")
			}
		}
		return nil
	}
	if u, err := url.Parse(c.CA); err != nil || u.Scheme != "https" || u.Host == "" {
		return errdefs.Invalid("--acme-ca", "%q is not an https:// ACME directory URL", c.CA)
	}
	if proxyOff {
		return errdefs.Invalid("--acme-ca", "the proxy answers the CA's challenges: ACME needs it (not --proxy off)")
	}
	for _, ch := range c.Challenges {
		if ch != proxy.HTTP01 && ch != proxy.TLSALPN01 {
			return errdefs.Invalid("--acme-challenges", "%q is neither %s nor %s", ch, proxy.HTTP01, proxy.TLSALPN01)
		}
	}
	if c.OnDemandAsk != "" {
		if u, err := url.Parse(c.OnDemandAsk); err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
			return errdefs.Invalid("--acme-on-demand-ask", "%q is not an http(s) URL", c.OnDemandAsk)
		}
	}
	if c.CARoot != "" {
		if _, err := c.roots(); err != nil {
			return err
		}
	}
	return nil
}

func (c *ACMEConfig) roots() (*x509.CertPool, error) {
	if c.CARoot == "" {
		return nil, nil
	}
	b, err := os.ReadFile(c.CARoot)
	if err != nil {
		return nil, errdefs.Invalid("--acme-ca-root", "%v", err)
	}
	pool := x509.NewCertPool()
	if !pool.AppendCertsFromPEM(b) {
		return nil, errdefs.Invalid("--acme-ca-root", "%s holds no PEM certificate", c.CARoot)
	}
	return pool, nil
}

// openACME starts ACME when --acme-ca is set: this node's challenge
// follower, pushing to its proxy, and the manager that orders, always on
// one host, on the leader only in a cluster (registered with the Hub).
func (d *Daemon) openACME(ctx context.Context) error {
	c := d.cfg.ACME
	if c.CA == "" || d.plane == nil {
		return nil
	}
	roots, err := c.roots()
	if err != nil {
		return err
	}
	key := d.certsKey
	log := d.log.With("part", "acme")
	legolog.SetDefault(log)
	f := acme.NewFollower(d.store, d.plane.Client().SetChallenges, clock.Real{}, log)
	go f.Run(ctx)
	m, err := acme.New(acme.Options{CA: c.CA, Email: c.Email, Roots: roots, Store: d.store, Key: key, Follower: f,
		Challenges: c.Challenges, OnDemand: acme.OnDemand{Allow: c.OnDemandAllow, Ask: c.OnDemandAsk},
		Events: d.events, Clock: clock.Real{}, Logger: log})
	if err != nil {
		return err
	}
	d.acme = m
	if _, ok := d.store.(*store.Etcd); ok && d.lead != nil {
		d.lead.hub.Register(m)
	} else {
		go m.Run(ctx)
	}
	d.notes = append(d.notes, fmt.Sprintf("certificates for apps' domains from %s (%s)", c.CA,
		strings.Join(append([]string{}, orDefault(c.Challenges, proxy.HTTP01)...), ", ")))
	return nil
}

func orDefault(s []string, def string) []string {
	if len(s) == 0 {
		return []string{def}
	}
	return s
}

// certsWithACME is the certificates' API with orders on demand: the
// proxy asks for a name a TLS handshake wanted and no certificate serves.
type certsWithACME struct {
	certsAPI
	m *acme.Manager
}

func (c certsWithACME) Demand(ctx context.Context, domain string) error {
	return c.m.Demand(ctx, domain)
}
