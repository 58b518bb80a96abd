package proxy

import (
	"bytes"
	"context"
	"crypto/sha256"
	"crypto/tls"
	"crypto/x509"
	"encoding/asn1"
	"net/http/httptest"
	"testing"
)

// An HTTP-01 challenge is answered for any host, before routing, on the
// fast path and through ServeHTTP; other paths, unknown tokens and the
// routes are left as they were, and removing the challenges ends the
// answers.
func TestHTTP01ChallengeAnswered(t *testing.T) {
	f := newFront(t, Options{})
	b := namedBackend(t, "app")
	f.p.SetRoute(routeTo("web", b))
	if err := f.p.SetChallenges([]Challenge{{Type: HTTP01, Domain: "www.example.test", Token: "tok-1", KeyAuth: "tok-1.thumb"}}); err != nil {
		t.Fatal(err)
	}
	for _, host := range []string{"www.example.test", "web.localhost", "stranger.test"} {
		code, body, h := f.get(t, host, ChallengePath+"tok-1")
		if code != 200 || body != "tok-1.thumb" || h.Get("Content-Type") != "text/plain" {
			t.Errorf("host %s: %d %q %v, want 200 tok-1.thumb text/plain", host, code, body, h.Get("Content-Type"))
		}
	}
	if code, body, _ := f.get(t, "web.localhost", ChallengePath+"other"); code != 200 || body != "app" {
		t.Errorf("an unknown token on an app's host: %d %q, want the app's answer", code, body)
	}
	if code, _, _ := f.get(t, "nobody.test", ChallengePath+"other"); code != 404 {
		t.Errorf("an unknown token on an unknown host: %d, want 404", code)
	}
	// ServeHTTP, the second engine, answers too.
	rec := httptest.NewRecorder()
	f.p.ServeHTTP(rec, httptest.NewRequest("GET", "http://x.test"+ChallengePath+"tok-1", nil))
	if rec.Code != 200 || rec.Body.String() != "tok-1.thumb" {
		t.Errorf("ServeHTTP: %d %q", rec.Code, rec.Body.String())
	}
	if err := f.p.SetChallenges(nil); err != nil {
		t.Fatal(err)
	}
	if code, _, _ := f.get(t, "www.example.test", ChallengePath+"tok-1"); code != 404 {
		t.Errorf("after the challenge went: %d, want 404", code)
	}
	if b.hits.Load() != 1 {
		t.Errorf("the app got %d requests, want 1 (the unknown token)", b.hits.Load())
	}
}

// A TLS-ALPN-01 handshake (only acme-tls/1 offered) for a name with a
// pending challenge gets its certificate: the name, the key
// authorization's digest in the critical acmeIdentifier extension; any
// other handshake gets none.
func TestALPNChallengeCertificate(t *testing.T) {
	p := New(Options{})
	if err := p.SetChallenges([]Challenge{{Type: TLSALPN01, Domain: "WWW.example.test", Token: "t", KeyAuth: "t.thumb"}}); err != nil {
		t.Fatal(err)
	}
	c := p.ALPNChallenge(&tls.ClientHelloInfo{ServerName: "www.example.test", SupportedProtos: []string{ALPNProto}})
	if c == nil {
		t.Fatal("no certificate for the challenge's handshake")
	}
	leaf, err := parseLeaf(c)
	if err != nil {
		t.Fatal(err)
	}
	if len(leaf.DNSNames) != 1 || leaf.DNSNames[0] != "WWW.example.test" {
		t.Errorf("names %v", leaf.DNSNames)
	}
	sum := sha256.Sum256([]byte("t.thumb"))
	found := false
	for _, e := range leaf.Extensions {
		if e.Id.Equal(idPeACMEIdentifier) {
			var got []byte
			if _, err := asn1.Unmarshal(e.Value, &got); err != nil || !bytes.Equal(got, sum[:]) || !e.Critical {
				t.Errorf("acmeIdentifier %x critical %v (%v), want %x critical", got, e.Critical, err, sum)
			}
			found = true
		}
	}
	if !found {
		t.Error("no acmeIdentifier extension")
	}
	for _, h := range []*tls.ClientHelloInfo{
		{ServerName: "www.example.test", SupportedProtos: []string{"h2", ALPNProto}},
		{ServerName: "www.example.test"},
		{ServerName: "other.example.test", SupportedProtos: []string{ALPNProto}},
	} {
		if p.ALPNChallenge(h) != nil {
			t.Errorf("%s %v: a challenge certificate", h.ServerName, h.SupportedProtos)
		}
	}
	if err := p.SetChallenges([]Challenge{{Type: "dns-01", Domain: "x.test"}}); err == nil {
		t.Error("a dns-01 challenge was taken")
	}
	if p.ALPNChallenge(&tls.ClientHelloInfo{ServerName: "www.example.test", SupportedProtos: []string{ALPNProto}}) == nil {
		t.Error("a refused change dropped the challenges")
	}
}

func parseLeaf(c *tls.Certificate) (*x509.Certificate, error) {
	return x509.ParseCertificate(c.Certificate[0])
}

// A handshake for a name no certificate serves is told to CertMissing
// (ACME may order it on demand); a served name, a nameless handshake and
// a TLS-ALPN-01 validation are not.
func TestCertMissingTold(t *testing.T) {
	told := make(chan string, 4)
	p := New(Options{CertMissing: func(_ context.Context, name string) bool { told <- name; return false }})
	for _, h := range []*tls.ClientHelloInfo{
		{ServerName: ""},
		{ServerName: "x.test", SupportedProtos: []string{ALPNProto}},
		{ServerName: "Shop.Example.test."},
	} {
		if c, err := p.edge.getCertificate(h); c != nil || err == nil {
			t.Fatalf("%q: a certificate", h.ServerName)
		}
	}
	if got := <-told; got != "shop.example.test" {
		t.Fatalf("told %q", got)
	}
	select {
	case got := <-told:
		t.Fatalf("told %q as well", got)
	default:
	}
}
