package e2e

import (
	"context"
	"crypto/tls"
	"encoding/json"
	"io"
	"net"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/shoal-run/shoal/internal/acme/pebbletest"
	"github.com/shoal-run/shoal/internal/api/types"
)

// The first visit to a name allowed on demand works: its TLS handshake is
// held while the daemon orders the certificate from Pebble, then served
// with it (Caddy's on-demand TLS). A name the policy does not allow gets
// no certificate and no order.
func TestEdgeOnDemandFirstVisit(t *testing.T) {
	plainFw, tlsFw := newForwarder(t), newForwarder(t)
	peb := pebbletest.Start(t, pebbletest.Options{HTTPPort: plainFw.port(), TLSPort: tlsFw.port()})
	d := startDaemon(t, "--proxy-tls", "127.0.0.1:0", "--domain", "sites.shoal.test",
		"--acme-ca", peb.Directory, "--acme-ca-root", peb.APIRoot, "--acme-challenges", "tls-alpn-01,http-01",
		"--acme-on-demand-allow", "*.sites.shoal.test")
	var h types.Health
	if err := json.Unmarshal([]byte(d.must("info", "--output", "json")), &h); err != nil || h.ProxyTLS == "" {
		t.Fatalf("info: %+v, %v: no HTTPS listener", h, err)
	}
	plainFw.target.Store(&h.Proxy)
	tlsFw.target.Store(&h.ProxyTLS)
	d.exampleImage("hello")
	d.deploy(manifest("1m", "10m"))

	roots, _, err := peb.IssuingRoot(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	client := &http.Client{Timeout: 2 * time.Minute, Transport: &http.Transport{
		DialContext: func(ctx context.Context, network, _ string) (net.Conn, error) {
			var dl net.Dialer
			return dl.DialContext(ctx, network, h.ProxyTLS)
		},
		TLSClientConfig:   &tls.Config{RootCAs: roots},
		DisableKeepAlives: true,
	}}
	const name = "hello.sites.shoal.test"
	if _, ok := d.certOf(name); ok {
		t.Fatalf("a certificate for %s before anyone asked", name)
	}
	// One request, no retry: the first handshake gets the certificate.
	resp, err := client.Get("https://" + name + "/")
	if err != nil {
		t.Fatalf("the first visit to https://%s/: %v", name, err)
	}
	b, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != 200 || !strings.HasPrefix(string(b), "hello from ") {
		t.Fatalf("the first visit to https://%s/: %d %q", name, resp.StatusCode, b)
	}
	if issuer := resp.TLS.PeerCertificates[0].Issuer.CommonName; !strings.Contains(issuer, "Pebble") {
		t.Fatalf("served a certificate of %q", issuer)
	}
	if c, ok := d.certOf(name); !ok || c.Pending || c.Source != "acme" {
		t.Fatalf("cert ls after the first visit: %+v (listed %v)", c, ok)
	}

	// Not allowed: the handshake fails, nothing is ordered.
	const stranger = "hello.elsewhere.test"
	conn, err := tls.DialWithDialer(&net.Dialer{Timeout: time.Minute}, "tcp", h.ProxyTLS,
		&tls.Config{RootCAs: roots, ServerName: stranger})
	if err == nil {
		conn.Close()
		t.Fatalf("a handshake for %s, which the policy does not allow, succeeded", stranger)
	}
	if c, ok := d.certOf(stranger); ok {
		t.Fatalf("a certificate record for %s: %+v", stranger, c)
	}
}
