package proxy

import (
	"testing"
	"time"

	"github.com/shoal-run/shoal/internal/clock"
	"github.com/shoal-run/shoal/internal/route"
)

// A certificate past its NotAfter (by the proxy's clock) is not served:
// the wildcard of the parent domain is, or, without one, no handshake.
func TestEdgeExpiredCertNotServed(t *testing.T) {
	now := time.Now()
	clk := clock.NewFake(now)
	f := newTLSFrontWith(t, Options{Clock: clk})
	issue := func(until time.Time, names ...string) route.Cert {
		cp, kp := f.ca.Issue(t, names, now.Add(-time.Hour), until)
		return route.Cert{Domains: names, CertPEM: cp, KeyPEM: kp}
	}
	f.p.SetCerts([]route.Cert{
		issue(now.Add(time.Hour), "www.example.test"),
		issue(now.Add(time.Hour), "alone.other.test"),
		issue(now.Add(30*24*time.Hour), "*.example.test"),
	})
	served := func(sni string) string {
		c, err := f.dialTLS(t, sni, nil)
		if err != nil {
			return "no handshake"
		}
		return c.ConnectionState().PeerCertificates[0].DNSNames[0]
	}
	if got := served("www.example.test"); got != "www.example.test" {
		t.Fatalf("www.example.test before expiry: served %s", got)
	}
	if got := served("alone.other.test"); got != "alone.other.test" {
		t.Fatalf("alone.other.test before expiry: served %s", got)
	}
	clk.Advance(2 * time.Hour) // past the two exact certificates' NotAfter
	if got := served("www.example.test"); got != "*.example.test" {
		t.Errorf("www.example.test once its certificate expired: served %s, want the wildcard", got)
	}
	if got := served("alone.other.test"); got != "no handshake" {
		t.Errorf("alone.other.test once its certificate expired: served %s, want no handshake", got)
	}
}
