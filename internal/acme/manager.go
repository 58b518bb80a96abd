// Package acme obtains and renews, from an ACME CA (Let's Encrypt; Pebble
// in tests), the certificates of the custom domains apps claim
// (store.DomainsPrefix) and of names a TLS handshake asked for that the
// operator's on-demand policy allows (OnDemand), through lego
// (github.com/go-acme/lego/v5) as a client library only: the account's
// key is sealed in the store with the secrets key, certificates go to
// internal/certs (Source "acme"), and challenges to every node's proxy
// through the store (Follower): HTTP-01 answered by the proxy before
// routing, TLS-ALPN-01 on its TLS listener.
//
// One Manager orders at a time: on one host it runs always (Run); in a
// cluster only on the leader (a cluster.LeaderWork), every write fenced
// by its term, so two nodes never order one domain at once, and what is
// due (a first order, a renewal at two thirds of a certificate's life, a
// retry after back-off) is read from the store again by the next leader.
// A refusal by the CA is recorded (the certificate's LastError, an event
// "certificate for X: ...") and tried again after a back-off that
// doubles, and never sooner than a rate limit's Retry-After.
package acme

import (
	"cmp"
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/json"
	"encoding/pem"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"slices"
	"strings"
	"sync"
	"time"

	legoacme "github.com/go-acme/lego/v5/acme"
	"github.com/go-acme/lego/v5/certcrypto"
	"github.com/go-acme/lego/v5/certificate"
	"github.com/go-acme/lego/v5/lego"
	"github.com/go-acme/lego/v5/registration"

	"github.com/shoal-run/shoal/internal/certs"
	"github.com/shoal-run/shoal/internal/clock"
	"github.com/shoal-run/shoal/internal/cluster"
	"github.com/shoal-run/shoal/internal/errdefs"
	"github.com/shoal-run/shoal/internal/events"
	"github.com/shoal-run/shoal/internal/proxy"
	"github.com/shoal-run/shoal/internal/secrets"
	"github.com/shoal-run/shoal/internal/store"
)

// EventKind is the kind of the events of certificates.
const EventKind = "certificate"

// Events is the event log a Manager writes to.
type Events interface {
	Emit(ctx context.Context, e events.Event) (events.Event, error)
}

// Options configure a Manager.
type Options struct {
	// CA is the ACME directory URL; Email the account's contact (may be
	// empty).
	CA, Email string
	// Roots are trusted for the CA's API (nil: the system's).
	Roots *x509.CertPool
	Store store.Store
	// Key seals the account's key (and, through certs, certificates').
	Key *secrets.Key
	// Follower is this node's; a challenge is validated once it has
	// reached the proxy.
	Follower *Follower
	// Challenges are the types offered (proxy.HTTP01, proxy.TLSALPN01);
	// default HTTP-01 only. With both, lego prefers TLS-ALPN-01.
	Challenges []string
	OnDemand   OnDemand
	Events     Events // may be nil
	Clock      clock.Clock
	Logger     *slog.Logger
	// OrderTimeout bounds one order (default 2 min).
	OrderTimeout time.Duration
}

// Manager orders and renews certificates.
type Manager struct {
	o    Options
	kick chan struct{}

	mu     sync.Mutex
	cancel context.CancelFunc
	done   chan struct{}

	asked askCache // the on-demand policy's recent answers
}

// New returns a Manager; nothing runs until Run or Establish.
func New(o Options) (*Manager, error) {
	if o.CA == "" {
		return nil, errdefs.Invalid("--acme-ca", "no ACME directory URL")
	}
	if o.Store == nil {
		return nil, errdefs.Invalid("store", "the ACME manager needs a store")
	}
	if o.Key == nil {
		return nil, errdefs.Invalid("--secrets-key-file", "the ACME manager needs a secrets key (the account's and certificates' keys are sealed with it)")
	}
	if len(o.Challenges) == 0 {
		o.Challenges = []string{proxy.HTTP01}
	}
	for _, c := range o.Challenges {
		if c != proxy.HTTP01 && c != proxy.TLSALPN01 {
			return nil, errdefs.Invalid("--acme-challenges", "%q is neither %s nor %s", c, proxy.HTTP01, proxy.TLSALPN01)
		}
	}
	if o.Clock == nil {
		o.Clock = clock.Real{}
	}
	if o.Logger == nil {
		o.Logger = slog.New(slog.DiscardHandler)
	}
	if o.OrderTimeout == 0 {
		o.OrderTimeout = 2 * time.Minute
	}
	if o.OnDemand.Max <= 0 {
		o.OnDemand.Max = DefaultOnDemandMax
	}
	if o.OnDemand.MaxFailures <= 0 {
		o.OnDemand.MaxFailures = DefaultOnDemandFailures
	}
	return &Manager{o: o, kick: make(chan struct{}, 1)}, nil
}

// Run orders and renews until ctx ends, writing to the store directly
// (one host).
func (m *Manager) Run(ctx context.Context) { m.run(ctx, m.o.Store) }

// Establish starts ordering under lead l, every write fenced by its term
// (cluster.LeaderWork).
func (m *Manager) Establish(l *cluster.Lead) {
	ctx, cancel := context.WithCancel(l.Context())
	done := make(chan struct{})
	m.mu.Lock()
	m.cancel, m.done = cancel, done
	m.mu.Unlock()
	go func() {
		defer close(done)
		m.run(ctx, fenced{Store: m.o.Store, t: l})
	}()
}

// Revoke stops what Establish started and waits for it.
func (m *Manager) Revoke() {
	m.mu.Lock()
	cancel, done := m.cancel, m.done
	m.cancel, m.done = nil, nil
	m.mu.Unlock()
	if cancel != nil {
		cancel()
		<-done
	}
}

// Demand is a TLS handshake's ask for a certificate for name, which no
// certificate serves (nil: one is being ordered, and the handshake waits
// for it). A name an app claims is ordered anyway. Another, allowed by
// the on-demand policy (its answer kept for askCacheFor), is recorded as
// wanted (on any node) and the leader orders it; refused, the error says
// why. At most OnDemand.Max names are wanted at once. A name whose last
// order failed is refused until its back-off ends, one dropped after
// MaxFailures until its tombstone's RefusedUntil.
func (m *Manager) Demand(ctx context.Context, name string) error {
	name = strings.ToLower(strings.TrimSuffix(name, "."))
	if kv, err := m.o.Store.Get(ctx, store.ACMEOrderKey(name)); err == nil {
		var o order
		now := m.o.Clock.Now()
		if json.Unmarshal(kv.Value, &o) == nil && now.Before(o.RefusedUntil) {
			return fmt.Errorf("%s: dropped after %d failed orders, refused until %s: %w",
				name, o.Failures, o.RefusedUntil.UTC().Format(time.RFC3339), errdefs.ErrInvalid)
		}
		if o.Failures > 0 && now.Before(o.NextTry) {
			return fmt.Errorf("%s: %d failed orders (%s), the next at %s: %w",
				name, o.Failures, o.LastError, o.NextTry.UTC().Format(time.RFC3339), errdefs.ErrUnavailable)
		}
	} else if !errdefs.IsNotFound(err) {
		return fmt.Errorf("certificate for %s on demand: %w", name, err)
	}
	if _, err := m.o.Store.Get(ctx, store.DomainKey(name)); err == nil {
		m.poke() // an app's: ordered on its own
		return nil
	} else if !errdefs.IsNotFound(err) {
		return fmt.Errorf("certificate for %s on demand: %w", name, err)
	}
	if err := m.asked.check(ctx, m.o.OnDemand, name, m.o.Clock.Now()); err != nil {
		return err
	}
	kvs, err := m.o.Store.List(ctx, store.ACMEWantedPrefix)
	if err != nil {
		return fmt.Errorf("certificate for %s on demand: %w", name, err)
	}
	if len(kvs) >= m.o.OnDemand.Max && !slices.ContainsFunc(kvs, func(kv store.KV) bool { return kv.Key == store.ACMEWantedKey(name) }) {
		err := fmt.Errorf("%s: already %d names wanted on demand, the most allowed: %w", name, len(kvs), errdefs.ErrInvalid)
		m.o.Logger.Warn("acme: a certificate on demand refused", "domain", name, "err", err)
		return err
	}
	_, err = m.o.Store.CompareAndSwap(ctx, store.ACMEWantedKey(name), 0, []byte(m.o.Clock.Now().UTC().Format(time.RFC3339)))
	if err != nil && !errdefs.IsConflict(err) {
		return fmt.Errorf("certificate for %s on demand: %w", name, err)
	}
	if err == nil {
		if err := m.reserved(ctx, name); err != nil {
			return err
		}
	}
	m.poke()
	return nil
}

// reserved checks the wanted record Demand just made for name is among
// the first OnDemand.Max by creation: racing Demands each made theirs
// after the count above, and those beyond the cap take theirs back.
func (m *Manager) reserved(ctx context.Context, name string) error {
	kvs, err := m.o.Store.List(ctx, store.ACMEWantedPrefix)
	if err != nil {
		return fmt.Errorf("certificate for %s on demand: %w", name, err)
	}
	if len(kvs) <= m.o.OnDemand.Max {
		return nil
	}
	slices.SortFunc(kvs, func(a, b store.KV) int { return cmp.Compare(a.CreateRev, b.CreateRev) })
	i := slices.IndexFunc(kvs, func(kv store.KV) bool { return kv.Key == store.ACMEWantedKey(name) })
	if i < m.o.OnDemand.Max {
		return nil
	}
	if err := m.o.Store.Delete(ctx, store.ACMEWantedKey(name)); err != nil && !errdefs.IsNotFound(err) {
		return fmt.Errorf("certificate for %s on demand: %w", name, err)
	}
	err = fmt.Errorf("%s: already %d names wanted on demand, the most allowed: %w", name, m.o.OnDemand.Max, errdefs.ErrInvalid)
	m.o.Logger.Warn("acme: a certificate on demand refused", "domain", name, "err", err)
	return err
}

func (m *Manager) poke() {
	select {
	case m.kick <- struct{}{}:
	default:
	}
}

// fenced is the store with its writes through a leader's term.
type fenced struct {
	store.Store
	t cluster.Term
}

func (f fenced) Put(ctx context.Context, key string, value []byte, _ ...store.PutOption) (int64, error) {
	return f.t.Put(ctx, key, value)
}

func (f fenced) Delete(ctx context.Context, key string) error { return f.t.Delete(ctx, key) }

func (f fenced) CompareAndSwap(ctx context.Context, key string, rev int64, value []byte, _ ...store.PutOption) (int64, error) {
	return f.t.CompareAndSwap(ctx, key, rev, value)
}

// run is one stretch of ordering: until ctx ends, each due domain is
// ordered in turn, and the loop sleeps until the next is due or the
// domains, certificates or wanted names change.
func (m *Manager) run(ctx context.Context, w store.Store) {
	r := &runner{m: m, w: w, certs: certs.New(w, m.o.Key, m.o.Clock)}
	// Challenges a former orderer left (it died mid-order) are dropped.
	if kvs, err := m.o.Store.List(ctx, store.ACMEChallengesPrefix); err == nil {
		for _, kv := range kvs {
			w.Delete(ctx, kv.Key)
		}
	}
	for _, prefix := range []string{store.DomainsPrefix, store.CertsPrefix, store.ACMEWantedPrefix} {
		ch, err := m.o.Store.Watch(ctx, prefix)
		if err != nil {
			m.o.Logger.Warn("acme: cannot watch the store; checking every minute", "prefix", prefix, "err", err)
			continue
		}
		go func() {
			for range ch {
				m.poke()
			}
		}()
	}
	for ctx.Err() == nil {
		next := r.pass(ctx)
		wait := time.Minute // the store is read again at least this often
		if !next.IsZero() {
			wait = min(wait, max(next.Sub(m.o.Clock.Now()), 0))
		}
		tm := m.o.Clock.NewTimer(wait)
		select {
		case <-ctx.Done():
		case <-m.kick:
		case <-tm.C():
		}
		tm.Stop()
	}
}

// runner is one run's state.
type runner struct {
	m      *Manager
	w      store.Store
	certs  *certs.Store
	client *lego.Client
	// clientErr and clientNext hold back a CA that cannot be reached.
	clientFails int
	clientNext  time.Time
}

// pass orders the first due domain and returns when to look again (the
// zero time: at once; another pass follows each order).
func (r *runner) pass(ctx context.Context) time.Time {
	m := r.m
	now := m.o.Clock.Now()
	wanted, err := r.wanted(ctx)
	if err != nil {
		m.o.Logger.Warn("acme: cannot read the domains", "err", err)
		return now.Add(10 * time.Second)
	}
	all, err := r.certs.List(ctx)
	if err != nil {
		m.o.Logger.Warn("acme: cannot read the certificates", "err", err)
		return now.Add(10 * time.Second)
	}
	byName := map[string]certs.Cert{}
	for _, c := range all {
		byName[c.Name()] = c
	}
	names := make([]string, 0, len(wanted))
	for d := range wanted {
		names = append(names, d)
	}
	slices.Sort(names)
	var next time.Time
	for _, d := range names {
		if covered(d, all, now) {
			continue
		}
		var have *certs.Cert
		if c, ok := byName[d]; ok {
			if c.Source != certs.SourceACME {
				continue // the operator's own
			}
			have = &c
		}
		o, err := r.order(ctx, d)
		if err != nil {
			m.o.Logger.Warn("acme: cannot read an order", "domain", d, "err", err)
			continue
		}
		at := due(have, o)
		if at.After(now) {
			if next.IsZero() || at.Before(next) {
				next = at
			}
			continue
		}
		if !r.clientNext.IsZero() && now.Before(r.clientNext) {
			return r.clientNext
		}
		r.obtain(ctx, d, wanted[d], o, have != nil)
		return time.Time{}
	}
	return next
}

// wanted returns every name to hold a certificate for, with the app that
// claims it ("" for a name wanted on demand).
func (r *runner) wanted(ctx context.Context) (map[string]string, error) {
	out := map[string]string{}
	kvs, err := r.m.o.Store.List(ctx, store.DomainsPrefix)
	if err != nil {
		return nil, err
	}
	for _, kv := range kvs {
		out[strings.TrimPrefix(kv.Key, store.DomainsPrefix)] = string(kv.Value)
	}
	kvs, err = r.m.o.Store.List(ctx, store.ACMEWantedPrefix)
	if err != nil {
		return nil, err
	}
	for _, kv := range kvs {
		d := strings.TrimPrefix(kv.Key, store.ACMEWantedPrefix)
		if _, ok := out[d]; !ok {
			out[d] = ""
		}
	}
	return out, nil
}

func (r *runner) order(ctx context.Context, domain string) (order, error) {
	var o order
	kv, err := r.m.o.Store.Get(ctx, store.ACMEOrderKey(domain))
	if errdefs.IsNotFound(err) {
		return o, nil
	}
	if err != nil {
		return o, err
	}
	return o, json.Unmarshal(kv.Value, &o)
}

// legoClient returns the run's ACME client, registering the account the
// first time.
func (r *runner) legoClient(ctx context.Context) (*lego.Client, error) {
	if r.client != nil {
		return r.client, nil
	}
	m := r.m
	if err := m.o.Key.CanSeal(); err != nil {
		return nil, err // no order without a key to seal the account's and the certificate's
	}
	u, err := loadAccount(ctx, m.o.Store, m.o.Key, m.o.CA, m.o.Email)
	if err != nil {
		return nil, err
	}
	fresh := u == nil
	if fresh {
		if u, err = newUser(m.o.Email); err != nil {
			return nil, err
		}
	}
	cfg := lego.NewConfig(u)
	cfg.CADirURL = m.o.CA
	cfg.UserAgent = "shoal"
	cfg.HTTPClient = &http.Client{Timeout: time.Minute, Transport: &http.Transport{
		Proxy:               http.ProxyFromEnvironment,
		DialContext:         (&net.Dialer{Timeout: 30 * time.Second}).DialContext,
		TLSHandshakeTimeout: 30 * time.Second,
		TLSClientConfig:     &tls.Config{RootCAs: m.o.Roots},
	}}
	c, err := lego.NewClient(cfg)
	if err != nil {
		return nil, fmt.Errorf("ACME CA %s: %w", m.o.CA, err)
	}
	for _, typ := range m.o.Challenges {
		p := &provider{typ: typ, w: r.w, applied: m.o.Follower}
		if typ == proxy.TLSALPN01 {
			err = c.Challenge.SetTLSALPN01Provider(p)
		} else {
			err = c.Challenge.SetHTTP01Provider(p)
		}
		if err != nil {
			return nil, err
		}
	}
	if fresh {
		reg, err := c.Registration.Register(ctx, registration.RegisterOptions{TermsOfServiceAgreed: true})
		if err != nil {
			return nil, fmt.Errorf("ACME CA %s: registering the account: %w", m.o.CA, err)
		}
		u.reg = reg
		if err := saveAccount(ctx, r.w, m.o.Key, m.o.CA, u); err != nil {
			return nil, err
		}
		m.o.Logger.Info("acme: account registered", "ca", m.o.CA, "account", reg.Location)
	}
	r.client = c
	return c, nil
}

// errSkip leaves a record as it is in an Update.
var errSkip = errors.New("left as it is")

// obtain orders domain's certificate and records the outcome.
func (r *runner) obtain(ctx context.Context, domain, app string, o order, renewal bool) {
	m := r.m
	what := "order"
	if renewal {
		what = "renewal"
	}
	m.o.Logger.Info("acme: ordering a certificate", "domain", domain, "app", app, "kind", what)
	octx, cancel := context.WithTimeout(ctx, m.o.OrderTimeout)
	defer cancel()
	c, err := r.legoClient(octx)
	var res *certificate.Resource
	if err == nil {
		res, err = c.Certificate.Obtain(octx, certificate.ObtainRequest{
			Domains: []string{domain}, Bundle: true, KeyType: certcrypto.EC256})
	} else {
		r.clientFails++
		r.clientNext = m.o.Clock.Now().Add(Backoff(r.clientFails, 0))
	}
	if ctx.Err() != nil {
		return // the lead or the daemon ended
	}
	var cert certs.Cert
	if err == nil {
		cert, err = fromResource(domain, res, m.o.Clock.Now())
	}
	if err != nil {
		r.failed(ctx, domain, app, o, err)
		return
	}
	r.clientFails, r.clientNext = 0, time.Time{}
	_, err = r.certs.Update(ctx, domain, func(c *certs.Cert) error {
		if c.Source == certs.SourceFile && !c.Pending() {
			return errSkip // an operator added their own meanwhile
		}
		*c = cert
		return nil
	})
	if err != nil && !errors.Is(err, errSkip) {
		m.o.Logger.Warn("acme: a certificate issued could not be stored", "domain", domain, "err", err)
		return
	}
	if err := r.w.Delete(ctx, store.ACMEOrderKey(domain)); err != nil && !errdefs.IsNotFound(err) {
		m.o.Logger.Warn("acme: an order's state could not be removed", "domain", domain, "err", err)
	}
	msg := fmt.Sprintf("certificate for %s issued by %s, valid until %s", domain, cert.Issuer, cert.NotAfter.UTC().Format(time.RFC3339))
	m.o.Logger.Info("acme: "+msg, "kind", what)
	r.event(ctx, app, msg)
}

// failed records a refused or failed order: the order's back-off, the
// certificate's LastError, an event.
func (r *runner) failed(ctx context.Context, domain, app string, o order, err error) {
	m := r.m
	now := m.o.Clock.Now()
	var retry time.Duration
	var rl *legoacme.RateLimitedError
	if errors.As(err, &rl) {
		retry = rl.RetryAfter
	}
	o.Failures++
	o.NextTry = now.Add(Backoff(o.Failures, retry))
	o.LastError = describe(err)
	if b, merr := json.Marshal(o); merr == nil {
		if _, werr := r.w.Put(ctx, store.ACMEOrderKey(domain), b); werr != nil {
			m.o.Logger.Warn("acme: an order's back-off could not be stored", "domain", domain, "err", werr)
		}
	}
	_, uerr := r.certs.Update(ctx, domain, func(c *certs.Cert) error {
		if c.Source == certs.SourceFile {
			return errSkip
		}
		c.Source = certs.SourceACME
		c.LastError, c.LastErrorAt = o.LastError, now
		return nil
	})
	if uerr != nil && !errors.Is(uerr, errSkip) {
		m.o.Logger.Warn("acme: a certificate's last error could not be stored", "domain", domain, "err", uerr)
	}
	msg := fmt.Sprintf("certificate for %s: %s (try %d; next at %s)", domain, o.LastError, o.Failures, o.NextTry.UTC().Format(time.RFC3339))
	if app == "" && o.Failures >= m.o.OnDemand.MaxFailures {
		msg = fmt.Sprintf("certificate for %s: %s (try %d; no longer wanted on demand)", domain, o.LastError, o.Failures)
		r.dropWanted(ctx, domain, o)
	}
	m.o.Logger.Warn("acme: " + msg)
	r.event(ctx, app, msg)
}

// refuseFor is how long a name dropped from on demand is refused.
const refuseFor = 6 * time.Hour

// dropWanted forgets a name wanted on demand whose orders keep failing:
// the wanted record and the pending certificate record (one that never
// held a certificate). Its order o stays as a tombstone, its failures
// kept, and Demand refuses the name for refuseFor.
func (r *runner) dropWanted(ctx context.Context, domain string, o order) {
	o.RefusedUntil = r.m.o.Clock.Now().Add(refuseFor)
	if b, err := json.Marshal(o); err == nil {
		if _, err := r.w.Put(ctx, store.ACMEOrderKey(domain), b); err != nil {
			r.m.o.Logger.Warn("acme: a dropped name's tombstone could not be stored", "domain", domain, "err", err)
		}
	}
	if err := r.w.Delete(ctx, store.ACMEWantedKey(domain)); err != nil && !errdefs.IsNotFound(err) {
		r.m.o.Logger.Warn("acme: a name wanted on demand could not be dropped", "domain", domain, "err", err)
	}
	if c, err := r.certs.Get(ctx, domain); err == nil && c.Source == certs.SourceACME && c.Pending() {
		if err := r.certs.Delete(ctx, domain); err != nil && !errdefs.IsNotFound(err) {
			r.m.o.Logger.Warn("acme: a pending certificate could not be dropped", "domain", domain, "err", err)
		}
	}
}

func (r *runner) event(ctx context.Context, app, msg string) {
	if r.m.o.Events == nil {
		return
	}
	if _, err := r.m.o.Events.Emit(ctx, events.Event{Kind: EventKind, App: app, Reason: msg}); err != nil {
		r.m.o.Logger.Warn("acme: an event could not be written", "err", err)
	}
}

// describe says why an order failed in one line: the CA's problem when
// it sent one.
func describe(err error) string {
	var pd *legoacme.ProblemDetails
	if errors.As(err, &pd) {
		kind := pd.Type[strings.LastIndexByte(pd.Type, ':')+1:]
		s := "the CA refused: " + pd.Detail
		if kind != "" {
			s += " (" + kind + ")"
		}
		for _, sp := range pd.SubProblems {
			s += "; " + sp.Detail
		}
		return s
	}
	s := err.Error()
	s = strings.Join(strings.Fields(s), " ")
	if len(s) > 500 {
		s = s[:500] + "…"
	}
	return s
}

// fromResource makes the Cert of an issued certificate.
func fromResource(domain string, res *certificate.Resource, now time.Time) (certs.Cert, error) {
	b, _ := pem.Decode(res.Certificate)
	if b == nil {
		return certs.Cert{}, fmt.Errorf("certificate for %s: the CA sent no PEM certificate", domain)
	}
	leaf, err := x509.ParseCertificate(b.Bytes)
	if err != nil {
		return certs.Cert{}, fmt.Errorf("certificate for %s: %w", domain, err)
	}
	c := certs.Cert{Domains: []string{domain}, CertPEM: res.Certificate, KeyPEM: res.PrivateKey,
		Source: certs.SourceACME, NotBefore: leaf.NotBefore, NotAfter: leaf.NotAfter, RenewedAt: now}
	c.Issuer = leaf.Issuer.CommonName
	if c.Issuer == "" {
		c.Issuer = leaf.Issuer.String()
	}
	return c, nil
}
