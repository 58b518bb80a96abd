package acme

import (
	"context"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"encoding/json"
	"encoding/pem"
	"errors"
	"log/slog"
	"net"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	legolog "github.com/go-acme/lego/v5/log"

	"github.com/shoal-run/shoal/internal/acme/pebbletest"
	"github.com/shoal-run/shoal/internal/certs"
	"github.com/shoal-run/shoal/internal/clock"
	"github.com/shoal-run/shoal/internal/events"
	"github.com/shoal-run/shoal/internal/proxy"
	"github.com/shoal-run/shoal/internal/secrets"
	"github.com/shoal-run/shoal/internal/store"
)

// rig is a Manager's world in a test: a bbolt store, a real proxy on a
// loopback port (plain, and TLS for TLS-ALPN-01) following the store's
// challenges, and Pebble validating against those ports.
type rig struct {
	st            store.Store
	key           *secrets.Key
	certs         *certs.Store
	events        *events.Log
	clk           *clock.Fake
	pebble        *pebbletest.Pebble
	m             *Manager
	stopRun       func() // stops m's Run
	tlsHandshakes chan string
}

func init() { legolog.SetDefault(slog.New(slog.DiscardHandler)) }

func newRig(t *testing.T, challenges ...string) *rig {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)
	st, err := store.OpenBolt(filepath.Join(t.TempDir(), "store.db"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { st.Close() })
	kb := make([]byte, secrets.KeySize)
	rand.Read(kb)
	key, err := secrets.NewKey(kb, "test")
	if err != nil {
		t.Fatal(err)
	}
	log := slog.New(slog.DiscardHandler)
	p := proxy.New(proxy.Options{Logger: log})
	plain, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	go p.Serve(plain)
	t.Cleanup(func() { p.Close() })
	r := &rig{st: st, key: key, clk: clock.NewFake(time.Now()), tlsHandshakes: make(chan string, 16)}
	// The TLS listener answers TLS-ALPN-01 handshakes only.
	tl, err := tls.Listen("tcp", "127.0.0.1:0", &tls.Config{
		NextProtos: []string{proxy.ALPNProto},
		GetCertificate: func(h *tls.ClientHelloInfo) (*tls.Certificate, error) {
			if c := p.ALPNChallenge(h); c != nil {
				select {
				case r.tlsHandshakes <- h.ServerName:
				default:
				}
				return c, nil
			}
			return nil, errors.New("no certificate")
		},
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { tl.Close() })
	go func() {
		for {
			c, err := tl.Accept()
			if err != nil {
				return
			}
			go func() {
				c.(*tls.Conn).HandshakeContext(ctx)
				c.Close()
			}()
		}
	}()
	r.pebble = pebbletest.Start(t, pebbletest.Options{
		HTTPPort: plain.Addr().(*net.TCPAddr).Port, TLSPort: tl.Addr().(*net.TCPAddr).Port})
	apiRoots := x509.NewCertPool()
	b, err := os.ReadFile(r.pebble.APIRoot)
	if err != nil || !apiRoots.AppendCertsFromPEM(b) {
		t.Fatalf("pebble's API root: %v", err)
	}
	f := NewFollower(st, func(ctx context.Context, list []proxy.Challenge) error { return p.SetChallenges(list) }, nil, log)
	go f.Run(ctx)
	r.certs = certs.New(st, key, r.clk)
	r.events = events.New(st, r.clk, 1000)
	r.m, err = New(Options{CA: r.pebble.Directory, Roots: apiRoots, Store: st, Key: key, Follower: f,
		Challenges: challenges, Events: r.events, Clock: r.clk, Logger: log})
	if err != nil {
		t.Fatal(err)
	}
	runCtx, stopRun := context.WithCancel(ctx)
	done := make(chan struct{})
	go func() { defer close(done); r.m.Run(runCtx) }()
	r.stopRun = func() { stopRun(); <-done }
	t.Cleanup(func() { cancel(); <-done })
	return r
}

// waitFor polls cond for up to a minute.
func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(90 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// issued waits for domain's certificate newer than after and checks it
// chains to Pebble's issuing root and covers domain.
func (r *rig) issued(t *testing.T, domain string, after time.Time) certs.Cert {
	t.Helper()
	var c certs.Cert
	waitFor(t, "the certificate of "+domain, func() bool {
		var err error
		c, err = r.certs.Get(context.Background(), domain)
		return err == nil && !c.Pending() && c.RenewedAt.After(after)
	})
	roots, _, err := r.pebble.IssuingRoot(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	pair, err := tls.X509KeyPair(c.CertPEM, c.KeyPEM)
	if err != nil {
		t.Fatalf("the certificate and its key: %v", err)
	}
	inter := x509.NewCertPool()
	for _, der := range pair.Certificate[1:] {
		ic, _ := x509.ParseCertificate(der)
		inter.AddCert(ic)
	}
	if _, err := pair.Leaf.Verify(x509.VerifyOptions{DNSName: domain, Roots: roots, Intermediates: inter}); err != nil {
		t.Fatalf("the certificate of %s does not verify against Pebble's root: %v", domain, err)
	}
	if c.Source != certs.SourceACME || c.LastError != "" || c.Issuer == "" {
		t.Fatalf("record: source %q, last error %q, issuer %q", c.Source, c.LastError, c.Issuer)
	}
	return c
}

func serial(t *testing.T, c certs.Cert) string {
	b, _ := pem.Decode(c.CertPEM)
	leaf, err := x509.ParseCertificate(b.Bytes)
	if err != nil {
		t.Fatal(err)
	}
	return leaf.SerialNumber.String()
}

func (r *rig) eventsWith(t *testing.T, text string) []events.Event {
	evs, err := r.events.List(context.Background(), 0, "")
	if err != nil {
		t.Fatal(err)
	}
	var out []events.Event
	for _, e := range evs {
		if e.Kind == EventKind && strings.Contains(e.Reason, text) {
			out = append(out, e)
		}
	}
	return out
}

// An app's custom domain gets its certificate from Pebble by HTTP-01,
// answered by the proxy; the account's key is in the store, sealed; when
// the clock reaches two thirds of the certificate's life it is renewed.
func TestIssueByHTTP01AndRenew(t *testing.T) {
	r := newRig(t)
	ctx := context.Background()
	const domain = "www.shoal.test"
	if _, err := store.ClaimDomains(ctx, r.st, "web", []string{domain}); err != nil {
		t.Fatal(err)
	}
	r.m.poke()
	first := r.issued(t, domain, time.Time{})
	waitFor(t, "the event of the issue", func() bool { return len(r.eventsWith(t, "certificate for "+domain+" issued")) == 1 })
	if got := r.eventsWith(t, "certificate for "+domain+" issued"); got[0].App != "web" {
		t.Fatalf("issue events: %+v", got)
	}
	kv, err := r.st.Get(ctx, store.ACMEAccountKey)
	if err != nil {
		t.Fatal(err)
	}
	var acct accountRecord
	if err := json.Unmarshal(kv.Value, &acct); err != nil || acct.URL == "" || acct.CA != r.pebble.Directory {
		t.Fatalf("account record: %+v %v", acct, err)
	}
	if strings.Contains(string(kv.Value), "PRIVATE KEY") {
		t.Fatal("the account's key is in the store in clear")
	}
	// Near expiry: the fake clock at two thirds of its life.
	r.clk.Set(RenewAt(first.NotBefore, first.NotAfter).Add(time.Second))
	second := r.issued(t, domain, first.RenewedAt)
	if serial(t, second) == serial(t, first) {
		t.Fatal("renewed, yet the same certificate")
	}
	if !second.RenewedAt.Equal(r.clk.Now()) && second.RenewedAt.Before(RenewAt(first.NotBefore, first.NotAfter)) {
		t.Fatalf("renewed at %v", second.RenewedAt)
	}
	if _, err := r.st.Get(ctx, store.ACMEOrderKey(domain)); err == nil {
		t.Fatal("an order's state is left after success")
	}
}

// A name the CA refuses leaves a pending record with LastError, an
// event, and a back-off: no new order before it ends, then one whose
// failure doubles it.
func TestRefusalBacksOff(t *testing.T) {
	r := newRig(t)
	ctx := context.Background()
	domain := pebbletest.Blocked
	if _, err := store.ClaimDomains(ctx, r.st, "shop", []string{domain}); err != nil {
		t.Fatal(err)
	}
	r.m.poke()
	readOrder := func() order {
		var o order
		if kv, err := r.st.Get(ctx, store.ACMEOrderKey(domain)); err == nil {
			json.Unmarshal(kv.Value, &o)
		}
		return o
	}
	waitFor(t, "the first refusal", func() bool {
		c, err := r.certs.Get(ctx, domain)
		return readOrder().Failures == 1 && err == nil && c.LastError != ""
	})
	start := r.clk.Now()
	o := readOrder()
	if !o.NextTry.Equal(start.Add(time.Minute)) || !strings.Contains(o.LastError, "rejectedIdentifier") {
		t.Fatalf("after one refusal: %+v", o)
	}
	c, err := r.certs.Get(ctx, domain)
	if err != nil || !c.Pending() || c.LastError != o.LastError || c.Source != certs.SourceACME {
		t.Fatalf("the certificate's record: %+v %v", c, err)
	}
	waitFor(t, "the event of the refusal", func() bool { return len(r.eventsWith(t, "certificate for "+domain+": the CA refused")) == 1 })
	evs := r.eventsWith(t, "certificate for "+domain+": the CA refused")
	if evs[0].App != "shop" {
		t.Fatalf("refusal events: %+v", evs)
	}
	// Before the back-off ends, a pass (a change in the store wakes one)
	// orders nothing.
	r.clk.Advance(30 * time.Second)
	if _, err := store.ClaimDomains(ctx, r.st, "other", []string{"unrelated.shoal.test"}); err != nil {
		t.Fatal(err)
	}
	r.issued(t, "unrelated.shoal.test", time.Time{})
	if o := readOrder(); o.Failures != 1 {
		t.Fatalf("ordered again within the back-off: %+v", o)
	}
	r.clk.Advance(31 * time.Second)
	waitFor(t, "the second refusal", func() bool { return readOrder().Failures == 2 })
	if o := readOrder(); !o.NextTry.Equal(r.clk.Now().Add(2 * time.Minute)) {
		t.Fatalf("after two refusals: next try %v, want %v", o.NextTry, r.clk.Now().Add(2*time.Minute))
	}
	waitFor(t, "the event of the second refusal", func() bool { return len(r.eventsWith(t, "certificate for "+domain+": the CA refused")) == 2 })
}

// TLS-ALPN-01: Pebble validates on the TLS listener, which gives the
// challenge's certificate for an acme-tls/1 handshake.
func TestIssueByTLSALPN01(t *testing.T) {
	r := newRig(t, proxy.TLSALPN01)
	ctx := context.Background()
	const domain = "tls.shoal.test"
	if _, err := store.ClaimDomains(ctx, r.st, "web", []string{domain}); err != nil {
		t.Fatal(err)
	}
	r.m.poke()
	r.issued(t, domain, time.Time{})
	select {
	case name := <-r.tlsHandshakes:
		if name != domain {
			t.Fatalf("challenge handshake for %q", name)
		}
	default:
		t.Fatal("no acme-tls/1 handshake reached the TLS listener")
	}
}

// Names asked for on a handshake are ordered only when the operator's
// policy allows them.
func TestOnDemandPolicy(t *testing.T) {
	ctx := context.Background()
	o := OnDemand{Allow: []string{"shop.example.test", "*.sites.example.test"}}
	for name, ok := range map[string]bool{
		"shop.example.test": true, "a.sites.example.test": true, "SHOP.example.test.": true,
		"a.b.sites.example.test": false, "evil.test": false, "sites.example.test": false,
	} {
		if err := o.Check(ctx, name); (err == nil) != ok {
			t.Errorf("%s: %v, want allowed %v", name, err, ok)
		}
	}
	if (OnDemand{}).Enabled() || !o.Enabled() {
		t.Error("Enabled")
	}
}

// A name asked for on a handshake is ordered when the on-demand policy
// allows it; another is refused and leaves nothing in the store.
func TestOnDemandOrders(t *testing.T) {
	r := newRig(t)
	r.stopRun()
	o := r.m.o
	o.OnDemand = OnDemand{Allow: []string{"*.sites.shoal.test"}}
	m, err := New(o)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { defer close(done); m.Run(ctx) }()
	t.Cleanup(func() { cancel(); <-done })
	if err := m.Demand(ctx, "evil.test"); err == nil {
		t.Fatal("a name outside the policy was taken")
	}
	if kvs, _ := r.st.List(ctx, store.ACMEWantedPrefix); len(kvs) != 0 {
		t.Fatalf("a refused name left %v", kvs)
	}
	if err := m.Demand(ctx, "Shop.sites.shoal.test"); err != nil {
		t.Fatal(err)
	}
	r.issued(t, "shop.sites.shoal.test", time.Time{})
}
