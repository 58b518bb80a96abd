// Package certs keeps the certificates shoal's proxy serves: in the store
// under certs/<name> (bbolt on one host, etcd in a cluster, so every node's
// proxy serves the same ones), each private key sealed with the secrets key
// (internal/secrets: AES-256-GCM, the file of --secrets-key-file), bound
// to the certificate's name. A certificate's name is the domain it was
// added for (its first domain; "*.example.test" for a wildcard).
//
// Certificates come from files (`shoal cert add`, Source "file": Check
// tells why a pair cannot be served) or from an ACME CA (Source "acme").
// The ACME side writes through this Store too: Put of a Cert with Source
// SourceACME when a certificate is issued or renewed (RenewedAt set), and
// Update to record LastError when the CA refuses, on the record of the
// domain's current certificate or, before the first one, on a record
// without CertPEM (pending: listed, never served). Update is a
// compare-and-swap loop, so the ACME side and an operator do not undo
// each other's writes.
//
// Follow gives the whole set to a consumer (the daemon, which pushes it
// to its proxy process) at once and after every change.
package certs

import (
	"bytes"
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/json"
	"encoding/pem"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/shoal-run/shoal/internal/clock"
	"github.com/shoal-run/shoal/internal/errdefs"
	"github.com/shoal-run/shoal/internal/manifest"
	"github.com/shoal-run/shoal/internal/secrets"
	"github.com/shoal-run/shoal/internal/store"
)

// Sources of a certificate.
const (
	SourceFile = "file"
	SourceACME = "acme"
)

// MaxPEM bounds a certificate chain or a key.
const MaxPEM = 64 << 10

// Cert is one certificate with its key.
type Cert struct {
	// Domains are the names it serves: Domains[0] is its name (the key
	// it is stored under), then the other names the certificate covers.
	Domains []string
	// CertPEM is the chain, leaf first; KeyPEM its private key. Both are
	// empty on a pending record (an ACME order not yet fulfilled).
	CertPEM, KeyPEM []byte
	// OCSP is a DER OCSP response to staple, when there is one.
	OCSP   []byte
	Source string
	// Issuer is the issuer's common name (else its whole name).
	Issuer              string
	NotBefore, NotAfter time.Time
	// RenewedAt is when it was last issued or renewed (by ACME) or
	// added (from files).
	RenewedAt time.Time
	// LastError is why its last renewal or order failed; "" after one
	// that worked.
	LastError   string
	LastErrorAt time.Time
}

// Name is the certificate's name, its first domain.
func (c Cert) Name() string {
	if len(c.Domains) == 0 {
		return ""
	}
	return c.Domains[0]
}

// Pending reports whether c holds no certificate yet.
func (c Cert) Pending() bool { return len(c.CertPEM) == 0 }

// record is a Cert as the store keeps it: the key sealed.
type record struct {
	Domains     []string        `json:"domains"`
	CertPEM     []byte          `json:"cert_pem,omitempty"`
	Key         *secrets.Sealed `json:"key,omitempty"`
	OCSP        []byte          `json:"ocsp,omitempty"`
	Source      string          `json:"source"`
	Issuer      string          `json:"issuer,omitempty"`
	NotBefore   time.Time       `json:"not_before,omitzero"`
	NotAfter    time.Time       `json:"not_after,omitzero"`
	RenewedAt   time.Time       `json:"renewed_at,omitzero"`
	LastError   string          `json:"last_error,omitempty"`
	LastErrorAt time.Time       `json:"last_error_at,omitzero"`
}

// sealApp is the "app" a certificate's key is sealed for: no app has this
// name (app names have no '/'), so an app's secret cannot be moved onto a
// certificate's key, nor the other way.
const sealApp = "certs/"

// CheckName reports why name cannot name a certificate: a domain
// manifest.CheckDomain accepts, or "*." and one.
func CheckName(name string) error {
	if err := manifest.CheckDomain(strings.TrimPrefix(name, "*.")); err != nil {
		return errdefs.Invalid("domain", "%v", err)
	}
	return nil
}

// Check parses a certificate chain and its key for domain and tells why
// they cannot be served: the key does not match the certificate, the
// certificate does not cover domain, or it has expired at now. Its Cert
// has Source SourceFile.
func Check(domain string, certPEM, keyPEM []byte, now time.Time) (Cert, error) {
	if err := CheckName(domain); err != nil {
		return Cert{}, err
	}
	if len(certPEM) > MaxPEM {
		return Cert{}, errdefs.Invalid("cert", "%d bytes; a chain has at most %d", len(certPEM), MaxPEM)
	}
	if len(keyPEM) > MaxPEM {
		return Cert{}, errdefs.Invalid("key", "%d bytes; a key has at most %d", len(keyPEM), MaxPEM)
	}
	if b, _ := pem.Decode(certPEM); b == nil || b.Type != "CERTIFICATE" {
		return Cert{}, errdefs.Invalid("cert", "no PEM CERTIFICATE block")
	}
	if b, _ := pem.Decode(keyPEM); b == nil || !strings.HasSuffix(b.Type, "PRIVATE KEY") {
		return Cert{}, errdefs.Invalid("key", "no PEM PRIVATE KEY block")
	}
	pair, err := tls.X509KeyPair(certPEM, keyPEM)
	if err != nil {
		return Cert{}, errdefs.Invalid("key", "does not go with the certificate: %v", err)
	}
	leaf := pair.Leaf
	if leaf == nil {
		if leaf, err = x509.ParseCertificate(pair.Certificate[0]); err != nil {
			return Cert{}, errdefs.Invalid("cert", "%v", err)
		}
	}
	if !Covers(leaf, domain) {
		return Cert{}, errdefs.Invalid("cert", "does not cover %s (it names %s)", domain, strings.Join(names(leaf), ", "))
	}
	if !now.Before(leaf.NotAfter) {
		return Cert{}, errdefs.Invalid("cert", "expired at %s", leaf.NotAfter.UTC().Format(time.RFC3339))
	}
	c := Cert{Domains: []string{domain}, CertPEM: certPEM, KeyPEM: keyPEM, Source: SourceFile}
	for _, n := range names(leaf) {
		if n != domain && CheckName(n) == nil {
			c.Domains = append(c.Domains, n)
		}
	}
	c.Issuer = leaf.Issuer.CommonName
	if c.Issuer == "" {
		c.Issuer = leaf.Issuer.String()
	}
	c.NotBefore, c.NotAfter = leaf.NotBefore, leaf.NotAfter
	return c, nil
}

// Covers reports whether leaf serves name: one of its DNS names is name,
// or (for a name that is not itself a wildcard) a wildcard that matches
// it.
func Covers(leaf *x509.Certificate, name string) bool {
	if strings.HasPrefix(name, "*.") {
		return slices.Contains(leaf.DNSNames, name)
	}
	return leaf.VerifyHostname(name) == nil
}

func names(leaf *x509.Certificate) []string {
	out := slices.Clone(leaf.DNSNames)
	if len(out) == 0 && leaf.Subject.CommonName != "" {
		out = append(out, leaf.Subject.CommonName)
	}
	for i, n := range out {
		out[i] = strings.ToLower(n)
	}
	return out
}

// Store keeps certificates in a store.Store, keys sealed with key.
type Store struct {
	st    store.Store
	key   *secrets.Key
	clock clock.Clock
}

// New returns the certificates of st, keys sealed with key.
func New(st store.Store, key *secrets.Key, c clock.Clock) *Store {
	if c == nil {
		c = clock.Real{}
	}
	return &Store{st: st, key: key, clock: c}
}

// Now is the time of the store's clock.
func (s *Store) Now() time.Time { return s.clock.Now() }

// Put stores c under its name, replacing the one there.
func (s *Store) Put(ctx context.Context, c Cert) error {
	b, err := s.encode(c)
	if err != nil {
		return err
	}
	if _, err := s.st.Put(ctx, store.CertKey(c.Name()), b); err != nil {
		return fmt.Errorf("certificate %s: %w", c.Name(), err)
	}
	return nil
}

// Update applies fn to the certificate named name and stores the result,
// unless the record changed meanwhile: then it reads it again and applies
// fn again. A missing record is given to fn as a zero Cert with
// Domains = [name] (a pending one, until fn sets CertPEM). fn must not
// change the name.
func (s *Store) Update(ctx context.Context, name string, fn func(*Cert) error) (Cert, error) {
	if err := CheckName(name); err != nil {
		return Cert{}, err
	}
	for {
		var c Cert
		var rev int64
		kv, err := s.st.Get(ctx, store.CertKey(name))
		switch {
		case err == nil:
			if c, err = s.decode(kv); err != nil {
				return Cert{}, err
			}
			rev = kv.ModRev
		case errdefs.IsNotFound(err):
			c = Cert{Domains: []string{name}}
		default:
			return Cert{}, fmt.Errorf("certificate %s: %w", name, err)
		}
		if err := fn(&c); err != nil {
			return Cert{}, err
		}
		if c.Name() != name {
			return Cert{}, fmt.Errorf("certificate %s: an update renamed it %q: %w", name, c.Name(), errdefs.ErrInvalid)
		}
		b, err := s.encode(c)
		if err != nil {
			return Cert{}, err
		}
		if _, err := s.st.CompareAndSwap(ctx, store.CertKey(name), rev, b); errdefs.IsConflict(err) {
			continue
		} else if err != nil {
			return Cert{}, fmt.Errorf("certificate %s: %w", name, err)
		}
		return c, nil
	}
}

// Get returns the certificate named name, its key opened.
func (s *Store) Get(ctx context.Context, name string) (Cert, error) {
	if err := CheckName(name); err != nil {
		return Cert{}, err
	}
	kv, err := s.st.Get(ctx, store.CertKey(name))
	if err != nil {
		return Cert{}, fmt.Errorf("certificate %s: %w", name, err)
	}
	return s.decode(kv)
}

// List returns every certificate by name, keys opened.
func (s *Store) List(ctx context.Context) ([]Cert, error) {
	kvs, err := s.st.List(ctx, store.CertsPrefix)
	if err != nil {
		return nil, fmt.Errorf("certificates: %w", err)
	}
	out := make([]Cert, 0, len(kvs))
	for _, kv := range kvs {
		c, err := s.decode(kv)
		if err != nil {
			return nil, err
		}
		out = append(out, c)
	}
	return out, nil
}

// ListInfo returns every certificate by name without its key (never
// opened): what may be shown.
func (s *Store) ListInfo(ctx context.Context) ([]Cert, error) {
	kvs, err := s.st.List(ctx, store.CertsPrefix)
	if err != nil {
		return nil, fmt.Errorf("certificates: %w", err)
	}
	out := make([]Cert, 0, len(kvs))
	for _, kv := range kvs {
		var r record
		if err := json.Unmarshal(kv.Value, &r); err != nil {
			return nil, fmt.Errorf("certificate record %s: %w", kv.Key, err)
		}
		out = append(out, Cert{Domains: r.Domains, CertPEM: r.CertPEM, OCSP: r.OCSP, Source: r.Source, Issuer: r.Issuer,
			NotBefore: r.NotBefore, NotAfter: r.NotAfter, RenewedAt: r.RenewedAt, LastError: r.LastError, LastErrorAt: r.LastErrorAt})
	}
	return out, nil
}

// Delete removes the certificate named name (not found when there is
// none).
func (s *Store) Delete(ctx context.Context, name string) error {
	if err := CheckName(name); err != nil {
		return err
	}
	k := store.CertKey(name)
	if _, err := s.st.Get(ctx, k); err != nil {
		return fmt.Errorf("certificate %s: %w", name, err)
	}
	if err := s.st.Delete(ctx, k); err != nil {
		return fmt.Errorf("certificate %s: %w", name, err)
	}
	return nil
}

// Follow calls fn with every certificate at once and again after each
// change, until ctx ends. A record that cannot be read (sealed with
// another key) is reported to bad and left out. When the store's watch
// ends early, Follow lists again and watches anew.
func (s *Store) Follow(ctx context.Context, fn func([]Cert), bad func(error)) {
	for ctx.Err() == nil {
		ch, err := s.st.Watch(ctx, store.CertsPrefix)
		if err == nil {
			s.deliver(ctx, fn, bad)
			for range ch {
				// Take every change queued, then list once.
				for drained := false; !drained; {
					select {
					case _, ok := <-ch:
						drained = !ok
					default:
						drained = true
					}
				}
				s.deliver(ctx, fn, bad)
			}
		} else if bad != nil {
			bad(err)
		}
		select {
		case <-ctx.Done():
		case <-time.After(time.Second):
		}
	}
}

func (s *Store) deliver(ctx context.Context, fn func([]Cert), bad func(error)) {
	kvs, err := s.st.List(ctx, store.CertsPrefix)
	if err != nil {
		if bad != nil && ctx.Err() == nil {
			bad(fmt.Errorf("certificates: %w", err))
		}
		return
	}
	out := make([]Cert, 0, len(kvs))
	for _, kv := range kvs {
		c, err := s.decode(kv)
		if err != nil {
			if bad != nil {
				bad(err)
			}
			continue
		}
		out = append(out, c)
	}
	fn(out)
}

func (s *Store) encode(c Cert) ([]byte, error) {
	name := c.Name()
	if err := CheckName(name); err != nil {
		return nil, err
	}
	if c.Source != SourceFile && c.Source != SourceACME {
		return nil, errdefs.Invalid("source", "%q: a certificate comes from %q or %q", c.Source, SourceFile, SourceACME)
	}
	if (len(c.CertPEM) == 0) != (len(c.KeyPEM) == 0) {
		return nil, fmt.Errorf("certificate %s: a certificate needs its key and a key its certificate: %w", name, errdefs.ErrInvalid)
	}
	r := record{Domains: c.Domains, CertPEM: c.CertPEM, OCSP: c.OCSP, Source: c.Source, Issuer: c.Issuer,
		NotBefore: c.NotBefore.UTC(), NotAfter: c.NotAfter.UTC(), RenewedAt: c.RenewedAt.UTC(),
		LastError: c.LastError, LastErrorAt: c.LastErrorAt.UTC()}
	if len(c.KeyPEM) > 0 {
		sealed, err := s.key.Seal(sealApp, name, c.KeyPEM)
		if err != nil {
			return nil, fmt.Errorf("certificate %s: %w", name, err)
		}
		r.Key = &sealed
	}
	return json.Marshal(r)
}

func (s *Store) decode(kv store.KV) (Cert, error) {
	var r record
	if err := json.Unmarshal(kv.Value, &r); err != nil {
		return Cert{}, fmt.Errorf("certificate record %s: %w", kv.Key, err)
	}
	name := strings.TrimPrefix(kv.Key, store.CertsPrefix)
	if len(r.Domains) == 0 || r.Domains[0] != name {
		return Cert{}, fmt.Errorf("certificate record %s: its domains %v do not start with its name", kv.Key, r.Domains)
	}
	c := Cert{Domains: r.Domains, CertPEM: r.CertPEM, OCSP: r.OCSP, Source: r.Source, Issuer: r.Issuer,
		NotBefore: r.NotBefore, NotAfter: r.NotAfter, RenewedAt: r.RenewedAt, LastError: r.LastError, LastErrorAt: r.LastErrorAt}
	if r.Key != nil {
		k, err := s.key.Open(sealApp, name, *r.Key)
		if err != nil {
			return Cert{}, fmt.Errorf("certificate %s: key: %w", name, err)
		}
		c.KeyPEM = k
	}
	if len(c.CertPEM) > 0 && bytes.Contains(c.CertPEM, []byte("PRIVATE KEY")) {
		return Cert{}, fmt.Errorf("certificate record %s: a private key in its chain", kv.Key)
	}
	return c, nil
}
