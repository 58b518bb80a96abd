// Package proxy is the HTTP data path of shoal's serving: it routes a request
// by its Host header (<app>.localhost or <app>.<domain>) to one ready replica
// of the app, chosen by least outstanding requests between two random
// choices within a revision drawn by the route's weights (or the replica a
// sticky cookie names), and holds requests for an app that has no ready
// replica while an Activator wakes it. A request that a replica failed
// before answering goes to another one when repeating it is safe.
//
// The routing table is replaced with one atomic pointer swap per change and
// is read without locks. An endpoint that leaves an app's route is closed: no
// request picks it after the change returns, requests already sent to it
// finish, and WaitIdle reports when the last of them is done, so that the
// replica can be frozen or stopped without dropping a request.
package proxy

import (
	"context"
	"log/slog"
	"net"
	"net/http"
	"strings"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/shoal-run/shoal/internal/clock"
	"github.com/shoal-run/shoal/internal/route"
)

// retryAfter is the Retry-After value, in seconds, of a 503 sent while an app
// is cold.
const retryAfter = "1"

// Activator wakes an app that has no ready endpoint (thaws a frozen replica
// or starts one). Activate must not block long; it is called for every
// request that has to wait, so many times for one wake-up. The proxy then
// waits for an endpoint to appear through SetRoute or Update.
type Activator interface {
	Activate(app string)
}

// Options configure a Proxy.
type Options struct {
	Activator  Activator             // may be nil: requests then only wait for a route
	Domain     string                // also route <app>.<Domain>
	Registerer prometheus.Registerer // may be nil
	Logger     *slog.Logger
	Clock      clock.Clock // for LastRequest and queue timing; default clock.Real
	// Limits bound what one client can hold; zero fields take defaults.
	Limits Limits
	// TrustedProxies are the peers whose X-Forwarded-* and Forwarded
	// fields are kept (see appendForwarded); anyone else's are replaced.
	TrustedProxies TrustList
	// CertMissing, if set, is told the name a TLS handshake asked for
	// that no certificate serves, and says whether one is being obtained
	// for it (ACME on demand; ctx bounds its answer): then the handshake
	// waits, up to OnDemandWait, for SetCerts to bring it (edge.go).
	CertMissing func(ctx context.Context, name string) bool
	// Dial, if set, connects to replicas over HTTP/1.1 in place of a
	// net.Dialer with DialTimeout (a test's slow connects).
	Dial func(ctx context.Context, network, addr string) (net.Conn, error)
	// TCPHost is the address (an IP or host name) the TCP routes listen
	// on, each on its route's port; "": the proxy listens for none.
	TCPHost string
	// TCPPorts are the ports TCP routes may listen on (zero:
	// route.DefaultTCPPorts); a route naming another is not listened for.
	TCPPorts route.PortRange
	// handshakeTimeout bounds a TLS handshake; zero: handshakeTimeout
	// (a test's shorter bound).
	handshakeTimeout time.Duration
}

// Proxy forwards requests to app replicas: as an http.Handler, or, faster,
// on the connections it accepts itself in Serve. Its routing table (and so
// SetRoute, Update, RemoveRoute, Load, Loads, Idle, Cut and WaitIdle) is the embedded
// table.
type Proxy struct {
	table
	activator Activator
	domain    string // ".<domain>", lower case, or ""
	log       *slog.Logger
	mistakes  mistakeLog
	trusted   TrustList

	front server   // the listener side of Serve
	tcp   tcpFront // the TCP routes' listeners (tcp.go)
	edge  edge     // TLS: certificates, the listener's config, redirects

	// challenges are the ACME challenges answered (acme.go); nil: none.
	challenges atomic.Pointer[challenges]
}

// New returns a Proxy with an empty table.
func New(o Options) *Proxy {
	p := &Proxy{activator: o.Activator, log: o.Logger, trusted: o.TrustedProxies}
	if p.log == nil {
		p.log = slog.Default()
	}
	c := o.Clock
	if c == nil {
		c = clock.Real{}
	}
	p.table.init(c, newMetrics(&p.table, o.Registerer, p.log), p.log)
	p.table.dial = o.Dial
	p.tcp.host, p.tcp.ports = o.TCPHost, o.TCPPorts
	p.table.changed = p.syncTCP
	if d := strings.Trim(strings.ToLower(o.Domain), "."); d != "" {
		p.domain = "." + d
	}
	p.front.init(p, o.Limits.withDefaults())
	p.edge.init(p.ALPNChallenge)
	p.edge.clock = c
	p.edge.missing = o.CertMissing
	p.edge.handshake = handshakeTimeout
	if o.handshakeTimeout > 0 {
		p.edge.handshake = o.handshakeTimeout
	}
	p.SetALPN("h2", p.front.serveH2)
	return p
}

// ServeHTTP routes r to a replica of the app its Host names.
func (p *Proxy) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if p.answerChallenge(w, r) {
		return
	}
	x := &stdReq{p: p, w: w, r: r}
	st := &x.st
	st.Context = r.Context()
	defer func() {
		if !st.hop { // a hop carries many clients' streams
			p.streamEnded(r)
		}
	}()
	defer p.finish(st)
	var f *refusal
	if h, ok := r.Header[HopHeader]; ok {
		delete(r.Header, HopHeader)
		hop := ""
		if len(h) == 1 {
			hop = h[0]
		}
		f = p.admitHop(st, r.Host, hop, r.RemoteAddr)
	} else {
		a := (*p.apps.Load())[p.appName(r.Host)]
		var g *uploadGuard
		if g, f = p.guardStdBody(r, a); f == nil {
			st.upload, _ = r.Body.(*guardedBody)
			defer g.stop()
			f = p.admit(st, a, r.ContentLength, x)
		}
	}
	if f != nil {
		if f.close {
			w.Header().Set("Connection", "close")
		}
		f.writeFor(w, r)
		return
	}
	if len(r.TransferEncoding) > 0 {
		// net/http drops a Content-Length sent with Transfer-Encoding;
		// such a request ends its connection (the fast path refuses
		// it when it sees the head).
		w.Header().Set("Connection", "close")
	}
	safe, idempotent := methodKind(r.Method)
	p.forward(st, x, safe, idempotent, r.ContentLength)
}

// appName returns the app a Host header names, or "": <app>.localhost,
// an app's own domain, or <app>.<domain>.
func (p *Proxy) appName(host string) string {
	if i := strings.LastIndexByte(host, ':'); i >= 0 && !strings.HasSuffix(host, "]") {
		host = host[:i]
	}
	host = strings.TrimSuffix(host, ".")
	if hasUpper(host) {
		host = strings.ToLower(host)
	}
	if name, ok := strings.CutSuffix(host, ".localhost"); ok {
		return name
	}
	// <app>.<domain> is that app's, when it exists, before any app's
	// own domains: no app takes another's name under --domain.
	name, under := "", false
	if p.domain != "" {
		name, under = strings.CutSuffix(host, p.domain)
		if under && (*p.apps.Load())[name] != nil {
			return name
		}
	}
	if a := (*p.domains.Load())[host]; a != nil {
		return a.name
	}
	if under {
		return name
	}
	return ""
}

func hasUpper(s string) bool {
	for i := 0; i < len(s); i++ {
		if c := s[i]; c >= 'A' && c <= 'Z' {
			return true
		}
	}
	return false
}

// reqState is a forwarded request as admission and the forwarder see it,
// whichever engine serves it: its context, app, endpoint and answer.
type reqState struct {
	context.Context
	app   *app // set while admit's count of the request is open
	ep    *endpoint
	tried []*endpoint
	// slow counts connects tried again on an endpoint that did not accept
	// in time (see forward).
	slow int
	// upload is the request body net/http reads, under its upload guard.
	upload *guardedBody
	code   int
	start  time.Time
	// tier is how the request found its app (warm: a ready replica); held
	// is the time it waited for one; sent is when it was first sent to a
	// replica and head when the replica's answer head came.
	tier       tier
	held       time.Duration
	sent, head time.Time
	// sticky is set when the route is sticky; stuck is then the endpoint
	// the request's cookie named and got, or nil.
	sticky bool
	stuck  *endpoint
	// hop is set for a request another node's proxy sent to st.ep: it
	// goes there or nowhere.
	hop bool
	// hsts: the answer carries Strict-Transport-Security (an HTTPS
	// request for a host with a certificate).
	hsts bool
}

// setCookie returns the Set-Cookie value the answer carries: the sticky
// cookie when the route is sticky and the endpoint was freshly picked.
func (s *reqState) setCookie() string {
	if s.sticky && s.ep != s.stuck {
		return s.ep.cookie
	}
	return ""
}

var _ http.Handler = (*Proxy)(nil)
