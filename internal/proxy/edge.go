package proxy

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"net"
	"net/http"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/shoal-run/shoal/internal/clock"
	"github.com/shoal-run/shoal/internal/route"
)

// The edge: TLS termination on a listener of its own (ServeTLS), each
// connection's certificate chosen by SNI from those the daemon pushes
// (SetCerts), then served by the same HTTP/1.1 engine as plain
// connections. A plain HTTP request for a host a certificate covers is
// redirected to HTTPS, and HTTPS answers carry HSTS, unless the app's
// route turns them off (route.Route.KeepHTTP, NoHSTS). <app>.localhost is
// never redirected. A handshake for a name no certificate serves, which
// ACME is obtaining one for on demand (Options.CertMissing), is held until
// the certificate arrives, up to OnDemandWait, as Caddy's on-demand TLS
// does: the first visit to a new name works.

// hstsValue is the Strict-Transport-Security of HTTPS answers: a year,
// this host only (subdomains may be other apps, or not served here).
const hstsValue = "max-age=31536000"

// handshakeTimeout bounds a TLS handshake.
const handshakeTimeout = HeaderTimeout

// OnDemandWait bounds how long a handshake waits for a certificate
// obtained on demand; maxOnDemandWaiting how many handshakes wait at once
// (one beyond fails at once, the certificate still asked for).
const (
	OnDemandWait       = 45 * time.Second
	maxOnDemandWaiting = 1024
)

// edgeCerts is the certificates in service, swapped whole on a change.
type edgeCerts struct {
	// byName maps a host name, or a "*.domain" wildcard, to the
	// certificate that serves it (the one valid longest when several do).
	byName map[string]*tls.Certificate
	// changed is closed when these are replaced (handshakes waiting for a
	// certificate on demand look again).
	changed chan struct{}
}

func newEdgeCerts() *edgeCerts {
	return &edgeCerts{byName: map[string]*tls.Certificate{}, changed: make(chan struct{})}
}

// edge is the proxy's TLS side.
type edge struct {
	certs atomic.Pointer[edgeCerts]
	// httpsPort is the TLS listener's port, for redirects: "" while none
	// is served (then nothing is redirected).
	httpsPort atomic.Pointer[string]

	mu sync.Mutex
	// alpn holds the protocols offered beside http/1.1, most preferred
	// first, and the server of each (SetALPN).
	alpn      []string
	alpnServe map[string]func(net.Conn)
	// handshake bounds a TLS handshake (handshakeTimeout, or a test's).
	handshake time.Duration
	config    atomic.Pointer[tls.Config]
	// challenge answers a TLS-ALPN-01 validation (Proxy.ALPNChallenge);
	// asked first.
	challenge func(*tls.ClientHelloInfo) *tls.Certificate
	// missing is told a name no certificate serves (Options.CertMissing).
	missing func(ctx context.Context, name string) bool
	// waiting counts the handshakes waiting for a certificate on demand;
	// held counts them by client (onDemandClient).
	waiting atomic.Int32
	heldMu  sync.Mutex
	held    map[string]int
	// clock tells a certificate past its NotAfter, which is not served.
	clock clock.Clock
}

func (e *edge) init(challenge func(*tls.ClientHelloInfo) *tls.Certificate) {
	e.challenge = challenge
	e.certs.Store(newEdgeCerts())
	e.alpnServe = map[string]func(net.Conn){}
	e.config.Store(e.makeConfig())
}

// SetCerts replaces the certificates the TLS listener serves. A
// certificate that does not parse, or whose key does not match, is
// left out and reported in the error; the others are served.
func (p *Proxy) SetCerts(certs []route.Cert) error {
	next := newEdgeCerts()
	var errs []error
	for _, c := range certs {
		pair, err := tls.X509KeyPair(c.CertPEM, c.KeyPEM)
		if err != nil {
			errs = append(errs, fmt.Errorf("certificate %v: %w", c.Domains, err))
			continue
		}
		if pair.Leaf == nil {
			if pair.Leaf, err = x509.ParseCertificate(pair.Certificate[0]); err != nil {
				errs = append(errs, fmt.Errorf("certificate %v: %w", c.Domains, err))
				continue
			}
		}
		if len(c.OCSP) > 0 {
			pair.OCSPStaple = c.OCSP
		}
		cert := &pair
		for _, d := range c.Domains {
			d = strings.ToLower(strings.TrimSuffix(d, "."))
			if old := next.byName[d]; old == nil || old.Leaf.NotAfter.Before(cert.Leaf.NotAfter) {
				next.byName[d] = cert
			}
		}
	}
	close(p.edge.certs.Swap(next).changed)
	return errors.Join(errs...)
}

// certFor returns the certificate that serves host at now: one for the
// name itself, else a wildcard for its parent domain; nil when none does.
// A certificate past its NotAfter serves nothing (the wildcard, or none,
// is used instead).
func (c *edgeCerts) certFor(host string, now time.Time) *tls.Certificate {
	if cert := c.byName[host]; cert != nil && !now.After(cert.Leaf.NotAfter) {
		return cert
	}
	if i := strings.IndexByte(host, '.'); i > 0 {
		if cert := c.byName["*"+host[i:]]; cert != nil && !now.After(cert.Leaf.NotAfter) {
			return cert
		}
	}
	return nil
}

// covered reports whether a certificate serves host (lower case, no port)
// and a TLS listener is there to serve it on.
func (p *Proxy) covered(host string) bool {
	if p.edge.httpsPort.Load() == nil || strings.HasSuffix(host, ".localhost") {
		return false
	}
	return p.edge.certs.Load().certFor(host, p.edge.clock.Now()) != nil
}

// SetALPN offers proto (an ALPN name such as "h2") on the TLS listener,
// before http/1.1 (and before protocols set earlier), and gives every
// connection that agrees on it to serve, after the handshake, instead of
// the HTTP/1.1 engine. serve runs in the connection's goroutine and owns
// the connection (a TLS one: it has ConnectionState); closing it ends its
// count against the client's limit. This is the one place a protocol
// beside HTTP/1.1 joins the TLS listener.
func (p *Proxy) SetALPN(proto string, serve func(net.Conn)) {
	e := &p.edge
	e.mu.Lock()
	defer e.mu.Unlock()
	if _, ok := e.alpnServe[proto]; !ok {
		e.alpn = append([]string{proto}, e.alpn...)
	}
	e.alpnServe[proto] = serve
	e.config.Store(e.makeConfig())
}

// makeConfig is the TLS listener's configuration: TLS 1.2 at least, with
// forward-secret AEAD suites only for 1.2 (1.3's are all such), the
// certificate by SNI, and session tickets whose keys crypto/tls rotates by
// itself (a new one each day, each good for a week). e.mu is held, or e
// is being made.
func (e *edge) makeConfig() *tls.Config {
	// ALPNProto last: only an ACME CA's validation offers it (and it
	// ends with the handshake).
	protos := append(append([]string{}, e.alpn...), "http/1.1", ALPNProto)
	return &tls.Config{
		MinVersion: tls.VersionTLS12,
		CipherSuites: []uint16{
			tls.TLS_ECDHE_ECDSA_WITH_AES_128_GCM_SHA256, tls.TLS_ECDHE_RSA_WITH_AES_128_GCM_SHA256,
			tls.TLS_ECDHE_ECDSA_WITH_AES_256_GCM_SHA384, tls.TLS_ECDHE_RSA_WITH_AES_256_GCM_SHA384,
			tls.TLS_ECDHE_ECDSA_WITH_CHACHA20_POLY1305_SHA256, tls.TLS_ECDHE_RSA_WITH_CHACHA20_POLY1305_SHA256,
		},
		NextProtos:     protos,
		GetCertificate: e.getCertificate,
	}
}

// errNoCert fails a handshake for a name no certificate serves.
var errNoCert = errors.New("no certificate for this server name")

func (e *edge) getCertificate(hello *tls.ClientHelloInfo) (*tls.Certificate, error) {
	if cert := e.challenge(hello); cert != nil {
		return cert, nil
	}
	name := strings.ToLower(strings.TrimSuffix(hello.ServerName, "."))
	if cert := e.certs.Load().certFor(name, e.clock.Now()); cert != nil {
		return cert, nil
	}
	if e.missing != nil && name != "" && !slices.Contains(hello.SupportedProtos, ALPNProto) {
		var client string
		if hello.Conn != nil {
			client = onDemandClient(hello.Conn.RemoteAddr())
		}
		if cert := e.onDemand(hello.Context(), name, client); cert != nil {
			return cert, nil
		}
	}
	return nil, fmt.Errorf("%w: %q", errNoCert, hello.ServerName)
}

// onDemand asks missing for name's certificate and, when one is being
// obtained, holds the handshake (its bound stretched to OnDemandWait)
// until SetCerts brings it: nil when it is refused or does not come in
// time, or when client or a prefix of it holds its most already
// (onDemandCaps).
func (e *edge) onDemand(ctx context.Context, name, client string) *tls.Certificate {
	if ctx == nil {
		ctx = context.Background()
	}
	if !e.holdFor(client) {
		return nil
	}
	defer e.unhold(client)
	if e.waiting.Add(1) > maxOnDemandWaiting {
		e.waiting.Add(-1)
		go e.missing(context.Background(), name)
		return nil
	}
	defer e.waiting.Add(-1)
	if b, ok := ctx.Value(handshakeBoundKey{}).(*handshakeBound); ok {
		b.extend(OnDemandWait)
	}
	ctx, cancel := context.WithTimeout(ctx, OnDemandWait)
	defer cancel()
	if !e.missing(ctx, name) {
		return nil
	}
	for {
		c := e.certs.Load()
		if cert := c.certFor(name, e.clock.Now()); cert != nil {
			return cert
		}
		select {
		case <-c.changed:
		case <-ctx.Done():
			return nil
		}
	}
}

// handshakeBound ends a handshake's context when its time is up; a
// handshake that waits for a certificate on demand gets longer.
type handshakeBound struct {
	mu    sync.Mutex
	timer *time.Timer
}

type handshakeBoundKey struct{}

// extend moves the end to d from now, unless it has come.
func (b *handshakeBound) extend(d time.Duration) {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.timer.Stop() {
		b.timer.Reset(d)
	}
}

func (b *handshakeBound) stop() {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.timer.Stop()
}

// ServeTLS accepts TLS connections on l (a TCP listener) until Shutdown
// or Close, as Serve does plain ones: each is handshaken in its own
// goroutine, within handshakeTimeout, then served by the HTTP/1.1 engine,
// or by the server SetALPN gave for the protocol it agreed on.
func (p *Proxy) ServeTLS(l net.Listener) error {
	if _, port, err := net.SplitHostPort(l.Addr().String()); err == nil {
		p.edge.httpsPort.Store(&port)
	}
	return p.serve(l, true)
}

// handshake runs the connection's TLS handshake in its goroutine and
// reports whether the HTTP/1.1 engine serves it on. Otherwise the
// connection is closed (a failed handshake) or was given to the server of
// the protocol it agreed on (SetALPN), and is no longer the engine's.
func (cc *cconn) handshake() bool {
	tc := cc.c.(*tls.Conn)
	ctx, cancel := context.WithCancel(cc.f.ctx)
	bound := &handshakeBound{timer: time.AfterFunc(cc.f.p.edge.handshake, cancel)}
	err := tc.HandshakeContext(context.WithValue(ctx, handshakeBoundKey{}, bound))
	bound.stop()
	cancel()
	proto := tc.ConnectionState().NegotiatedProtocol
	if err == nil && (proto == "" || proto == "http/1.1") {
		cc.sni = tc.ConnectionState().ServerName
		return true
	}
	var serve func(net.Conn)
	if err == nil {
		e := &cc.f.p.edge
		e.mu.Lock()
		serve = e.alpnServe[proto]
		e.mu.Unlock()
	} else if !errors.Is(err, errNoCert) {
		cc.f.p.clientMistake("proxy: TLS handshake failed", "remote", cc.client, "err", err)
	}
	cc.f.remove(cc)
	client := cc.client
	if serve == nil {
		tc.Close()
		cc.f.connGone(client)
		return false
	}
	serve(&alpnConn{Conn: tc, gone: &countedConn{gone: func() { cc.f.connGone(client) }}})
	return false
}

// alpnConn is a TLS connection given to the server of the protocol it
// agreed on: it stops counting against its client's connections when
// that server closes it. Its ConnectionState is the TLS connection's.
type alpnConn struct {
	*tls.Conn
	gone *countedConn
}

func (c *alpnConn) Close() error {
	err := c.Conn.Close()
	c.gone.closed()
	return err
}

// edgeAnswer decides what the edge does with a request for host (as the
// client sent it) on a connection that is TLS or not, for an app whose
// route is rt: a redirect to HTTPS (its Location), or HSTS on the answer.
func (p *Proxy) edgeAnswer(rt *routeSnap, host string, isTLS bool) (redirect bool, hsts bool) {
	if p.edge.httpsPort.Load() == nil || (!rt.redirect && !rt.hsts) {
		return false, false
	}
	name := hostOnly(host)
	if !p.covered(name) {
		return false, false
	}
	if isTLS {
		return false, rt.hsts
	}
	return rt.redirect, false
}

// misdirected reports whether a request for host (as the client sent it)
// on a TLS connection whose handshake asked for sni must be refused with
// 421 Misdirected Request: the certificate serving sni does not cover
// host, so the client reached this connection for another name (one app's
// connection used for another app's Host). A connection whose certificate
// covers both (a wildcard, several names) may carry either, as HTTP/2
// clients coalesce.
func (p *Proxy) misdirected(sni, host string) bool {
	name := hostOnly(host)
	sni = strings.ToLower(strings.TrimSuffix(sni, "."))
	if name == sni || sni == "" {
		return false
	}
	cert := p.edge.certs.Load().certFor(sni, p.edge.clock.Now())
	return cert == nil || cert.Leaf == nil || cert.Leaf.VerifyHostname(name) != nil
}

// location is where a redirect to HTTPS sends a request for host and uri.
func (p *Proxy) location(host, uri string) string {
	name := hostOnly(host)
	port := ""
	if pp := p.edge.httpsPort.Load(); pp != nil && *pp != "443" {
		port = ":" + *pp
	}
	if strings.IndexByte(name, ':') >= 0 {
		name = "[" + name + "]"
	}
	if !strings.HasPrefix(uri, "/") {
		uri = "/"
	}
	return "https://" + name + port + uri
}

// redirectRefusal answers a plain HTTP request with 308 to HTTPS: the
// method and body are kept by the client.
func redirectRefusal(loc string) *refusal {
	return &refusal{code: http.StatusPermanentRedirect, err: fmt.Errorf("use HTTPS: %s", loc), location: loc}
}

// hostOnly is a Host header's name, lower case, without its port or a
// final dot.
func hostOnly(host string) string {
	if i := strings.LastIndexByte(host, ':'); i >= 0 && !strings.HasSuffix(host, "]") {
		host = host[:i]
	}
	host = strings.TrimSuffix(strings.TrimPrefix(strings.TrimSuffix(host, "]"), "["), ".")
	if hasUpper(host) {
		host = strings.ToLower(host)
	}
	return host
}
