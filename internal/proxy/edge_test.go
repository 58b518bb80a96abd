package proxy

import (
	"bufio"
	"crypto/tls"
	"io"
	"net"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/shoal-run/shoal/internal/certs/certstest"
	"github.com/shoal-run/shoal/internal/route"
)

// tlsFront is a proxy serving plain HTTP and TLS on two loopback
// listeners, with a client that trusts ca alone.
type tlsFront struct {
	*front
	tlsAddr string
	ca      *certstest.CA
}

func newTLSFront(t *testing.T) *tlsFront {
	t.Helper()
	return newTLSFrontWith(t, Options{Domain: "apps.test"})
}

// newTLSFrontWith is newTLSFront with the proxy's options o.
func newTLSFrontWith(t *testing.T, o Options) *tlsFront {
	t.Helper()
	f := newFront(t, o)
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- f.p.ServeTLS(l) }()
	t.Cleanup(func() {
		f.p.Close()
		if err := <-done; err != http.ErrServerClosed {
			t.Errorf("ServeTLS returned %v", err)
		}
	})
	return &tlsFront{front: f, tlsAddr: l.Addr().String(), ca: certstest.NewCA(t, "Edge Test CA")}
}

// cert makes a route.Cert of the front's CA for names.
func (f *tlsFront) cert(t *testing.T, names ...string) route.Cert {
	cp, kp := f.ca.Issue(t, names, time.Time{}, time.Time{})
	return route.Cert{Domains: names, CertPEM: cp, KeyPEM: kp}
}

// dialTLS handshakes with the TLS listener for server name sni.
func (f *tlsFront) dialTLS(t *testing.T, sni string, cfg *tls.Config) (*tls.Conn, error) {
	t.Helper()
	if cfg == nil {
		cfg = &tls.Config{}
	}
	cfg.RootCAs, cfg.ServerName = f.ca.Pool(), sni
	d := &net.Dialer{Timeout: 30 * time.Second}
	c, err := tls.DialWithDialer(d, "tcp", f.tlsAddr, cfg)
	if err == nil {
		t.Cleanup(func() { c.Close() })
	}
	return c, err
}

// getTLS sends GET / for host over a new TLS connection.
func (f *tlsFront) getTLS(t *testing.T, host string) *http.Response {
	t.Helper()
	c, err := f.dialTLS(t, host, nil)
	if err != nil {
		t.Fatalf("handshake for %s: %v", host, err)
	}
	io.WriteString(c, "GET /p?q=1 HTTP/1.1\r\nHost: "+host+"\r\n\r\n")
	resp, err := http.ReadResponse(bufio.NewReader(c), nil)
	if err != nil {
		t.Fatalf("GET https://%s: %v", host, err)
	}
	b, _ := io.ReadAll(io.LimitReader(resp.Body, 1<<20))
	resp.Body = io.NopCloser(strings.NewReader(string(b)))
	return resp
}

func body(r *http.Response) string { b, _ := io.ReadAll(r.Body); return string(b) }

func TestEdgeSNIChoosesCertificate(t *testing.T) {
	f := newTLSFront(t)
	shop := f.cert(t, "shop.example.test")
	wild := f.cert(t, "*.example.test")
	other := f.cert(t, "other.test")
	if err := f.p.SetCerts([]route.Cert{wild, shop, other, {Domains: []string{"bad.test"}, CertPEM: []byte("x"), KeyPEM: []byte("y")}}); err == nil || !strings.Contains(err.Error(), "bad.test") {
		t.Fatalf("SetCerts with a bad pair: %v", err)
	}
	for _, c := range []struct{ sni, want string }{
		{"shop.example.test", "shop.example.test"}, // the exact name before the wildcard
		{"www.example.test", "*.example.test"},
		{"WWW.Example.Test", "*.example.test"},
		{"other.test", "other.test"},
	} {
		conn, err := f.dialTLS(t, c.sni, nil)
		if err != nil {
			t.Fatalf("%s: %v", c.sni, err)
		}
		st := conn.ConnectionState()
		if got := st.PeerCertificates[0].DNSNames[0]; got != c.want {
			t.Errorf("%s got the certificate of %s, want %s", c.sni, got, c.want)
		}
		if st.NegotiatedProtocol != "" {
			t.Errorf("%s: ALPN %q without asking", c.sni, st.NegotiatedProtocol)
		}
	}
	// A wildcard covers one label only; no certificate: no handshake.
	for _, sni := range []string{"a.b.example.test", "example.test", "nothing.test"} {
		if _, err := f.dialTLS(t, sni, nil); err == nil {
			t.Errorf("%s: handshake without a certificate for it", sni)
		}
	}
	// TLS 1.1 is refused; 1.2 and ALPN h2 are spoken.
	if _, err := f.dialTLS(t, "other.test", &tls.Config{MaxVersion: tls.VersionTLS11}); err == nil {
		t.Error("TLS 1.1 accepted")
	}
	c, err := f.dialTLS(t, "other.test", &tls.Config{MaxVersion: tls.VersionTLS12, NextProtos: []string{"h2", "http/1.1"}})
	if err != nil {
		t.Fatal(err)
	}
	if st := c.ConnectionState(); st.Version != tls.VersionTLS12 || st.NegotiatedProtocol != "h2" {
		t.Errorf("TLS 1.2 connection: version %x, ALPN %q", st.Version, st.NegotiatedProtocol)
	}
	// Replacing the set takes a certificate out of service.
	f.p.SetCerts([]route.Cert{wild})
	if _, err := f.dialTLS(t, "other.test", nil); err == nil {
		t.Error("other.test still served after its certificate went")
	}
}

func TestEdgeOCSPStapleAndResumption(t *testing.T) {
	f := newTLSFront(t)
	c := f.cert(t, "shop.example.test")
	c.OCSP = []byte("an OCSP response")
	f.p.SetCerts([]route.Cert{c})
	cache := tls.NewLRUClientSessionCache(4)
	for i := range 2 {
		conn, err := f.dialTLS(t, "shop.example.test", &tls.Config{ClientSessionCache: cache, MaxVersion: tls.VersionTLS12})
		if err != nil {
			t.Fatal(err)
		}
		st := conn.ConnectionState()
		if string(st.OCSPResponse) != "an OCSP response" {
			t.Errorf("stapled %q", st.OCSPResponse)
		}
		if st.DidResume != (i == 1) {
			t.Errorf("connection %d: resumed %v", i, st.DidResume)
		}
	}
}

func TestEdgeRoutesDomainsRedirectsAndHSTS(t *testing.T) {
	f := newTLSFront(t)
	web := namedBackend(t, "web")
	api := namedBackend(t, "api")
	plain := namedBackend(t, "plain")
	rw := routeTo("web", web)
	rw.Domains = []string{"www.example.test", "Example.Test"}
	ra := routeTo("api", api)
	ra.Domains = []string{"api.example.test"}
	ra.KeepHTTP, ra.NoHSTS = true, true
	rp := routeTo("plain", plain)
	rp.Domains = []string{"plain.test"} // no certificate
	f.p.Update([]route.Route{rw, ra, rp})
	f.p.SetCerts([]route.Cert{f.cert(t, "*.example.test", "example.test"), f.cert(t, "*.apps.test")})

	// Plain HTTP: a domain with a certificate redirects (308, the port of
	// the TLS listener, the request target kept); one without, an app
	// that keeps HTTP and <app>.localhost are served.
	_, tlsPort, _ := net.SplitHostPort(f.tlsAddr)
	f.client.CheckRedirect = func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }
	for _, host := range []string{"www.example.test", "example.test:8080", "web.apps.test"} {
		code, _, h := f.get(t, host, "/p?q=1")
		name, _, _ := strings.Cut(host, ":")
		if want := "https://" + name + ":" + tlsPort + "/p?q=1"; code != http.StatusPermanentRedirect || h.Get("Location") != want {
			t.Errorf("http://%s: %d to %q, want 308 to %s", host, code, h.Get("Location"), want)
		}
	}
	for host, want := range map[string]string{"api.example.test": "api", "plain.test": "plain", "web.localhost": "web"} {
		if code, b, h := f.get(t, host, "/"); code != 200 || b != want || h.Get("Strict-Transport-Security") != "" {
			t.Errorf("http://%s: %d %q hsts %q, want 200 %q without HSTS", host, code, b, h.Get("Strict-Transport-Security"), want)
		}
	}
	// The same redirect from net/http's engine (an HTTP/1.0 request).
	rc := f.dial(t)
	rc.send("GET /old HTTP/1.0\r\nHost: www.example.test\r\n\r\n")
	if resp, _ := rc.read("GET"); resp.StatusCode != http.StatusPermanentRedirect || !strings.HasSuffix(resp.Header.Get("Location"), "/old") {
		t.Errorf("HTTP/1.0 request: %d to %q", resp.StatusCode, resp.Header.Get("Location"))
	}

	// HTTPS: routed by domain, HSTS unless the app turned it off.
	for host, want := range map[string]struct {
		body string
		hsts bool
	}{"www.example.test": {"web", true}, "example.test": {"web", true}, "web.apps.test": {"web", true}, "api.example.test": {"api", false}} {
		resp := f.getTLS(t, host)
		hsts := resp.Header.Get("Strict-Transport-Security")
		if b := body(resp); resp.StatusCode != 200 || b != want.body || (hsts == hstsValue) != want.hsts {
			t.Errorf("https://%s: %d %q hsts %q; want %q, hsts %v", host, resp.StatusCode, b, hsts, want.body, want.hsts)
		}
	}
	// The replica hears it came over HTTPS.
	proto := newBackend(t, func(w http.ResponseWriter, r *http.Request) { io.WriteString(w, r.Header.Get("X-Forwarded-Proto")) })
	rw = routeTo("web", proto)
	rw.Domains = []string{"www.example.test"}
	f.p.SetRoute(rw)
	if b := body(f.getTLS(t, "www.example.test")); b != "https" {
		t.Errorf("X-Forwarded-Proto %q over TLS", b)
	}
	// A domain dropped from the route is no longer routed.
	if code, _, _ := f.get(t, "example.test", "/"); code != http.StatusNotFound {
		t.Errorf("example.test after the route dropped it: %d", code)
	}
	f.p.RemoveRoute("api")
	if code, _, _ := f.get(t, "api.example.test", "/"); code != http.StatusNotFound {
		t.Errorf("api.example.test after its app went: %d", code)
	}
}

func TestEdgeALPNHook(t *testing.T) {
	f := newTLSFront(t)
	f.p.SetCerts([]route.Cert{f.cert(t, "shop.example.test")})
	got := make(chan string, 1)
	f.p.SetALPN("test/1", func(c net.Conn) {
		defer c.Close()
		st := c.(interface{ ConnectionState() tls.ConnectionState }).ConnectionState()
		got <- st.NegotiatedProtocol
	})
	if _, err := f.dialTLS(t, "shop.example.test", &tls.Config{NextProtos: []string{"test/1", "http/1.1"}}); err != nil {
		t.Fatal(err)
	}
	if p := recv(t, got, "the ALPN hook's connection"); p != "test/1" {
		t.Fatalf("hook got %q", p)
	}
	// http/1.1 clients still reach the engine.
	web := namedBackend(t, "web")
	rw := routeTo("web", web)
	rw.Domains = []string{"shop.example.test"}
	f.p.SetRoute(rw)
	if b := body(f.getTLS(t, "shop.example.test")); b != "web" {
		t.Fatalf("HTTP/1.1 over TLS beside the hook: %q", b)
	}
}

// A TLS-ALPN-01 validation gets the challenge's certificate on the TLS
// listener, for a name with no certificate yet, and nothing else does.
func TestEdgeAnswersTLSALPN01(t *testing.T) {
	f := newTLSFront(t)
	if err := f.p.SetChallenges([]Challenge{{Type: TLSALPN01, Domain: "new.example.test", KeyAuth: "tok.thumb"}}); err != nil {
		t.Fatal(err)
	}
	c, err := tls.Dial("tcp", f.tlsAddr, &tls.Config{ServerName: "new.example.test", NextProtos: []string{ALPNProto}, InsecureSkipVerify: true})
	if err != nil {
		t.Fatalf("TLS-ALPN-01 handshake: %v", err)
	}
	defer c.Close()
	st := c.ConnectionState()
	if st.NegotiatedProtocol != ALPNProto || len(st.PeerCertificates[0].Extensions) == 0 ||
		!st.PeerCertificates[0].Extensions[len(st.PeerCertificates[0].Extensions)-1].Id.Equal(idPeACMEIdentifier) {
		t.Fatalf("ALPN %q, certificate %v", st.NegotiatedProtocol, st.PeerCertificates[0].DNSNames)
	}
	if _, err := f.dialTLS(t, "new.example.test", nil); err == nil {
		t.Fatal("an ordinary handshake got the challenge's certificate")
	}
}

// A long domain (up to 253 characters) is routed by the fast path too.
func TestEdgeLongDomainRouted(t *testing.T) {
	f := newFront(t, Options{})
	long := strings.Repeat(strings.Repeat("a", 60)+".", 3) + "example.test" // 195 characters
	r := routeTo("web", namedBackend(t, "web"))
	r.Domains = []string{long}
	f.p.SetRoute(r)
	if code, b, _ := f.get(t, long, "/"); code != 200 || b != "web" {
		t.Fatalf("http://%s/: %d %q", long, code, b)
	}
}
