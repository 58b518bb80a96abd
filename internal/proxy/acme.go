package proxy

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/sha256"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/asn1"
	"fmt"
	"math/big"
	"net/http"
	"strings"
	"time"
)

// ChallengePath is where an ACME CA asks for an HTTP-01 challenge's
// answer: ChallengePath + token, on any host.
const ChallengePath = "/.well-known/acme-challenge/"

// ALPNProto is the ALPN protocol of a TLS-ALPN-01 validation (RFC 8737).
const ALPNProto = "acme-tls/1"

// Challenge types.
const (
	HTTP01    = "http-01"
	TLSALPN01 = "tls-alpn-01"
)

// Challenge is an ACME challenge the proxy answers while the CA validates
// it: for HTTP-01, GET ChallengePath+Token on any host answers KeyAuth;
// for TLS-ALPN-01, a handshake for Domain offering only ALPNProto gets a
// certificate made from KeyAuth.
type Challenge struct {
	Type    string `json:"type"`
	Domain  string `json:"domain"`
	Token   string `json:"token"`
	KeyAuth string `json:"key_auth"`
}

// challenges is what SetChallenges built: answers by token, certificates
// by domain. nil when there is none, so a request pays one load.
type challenges struct {
	http map[string]string
	alpn map[string]*tls.Certificate
}

// SetChallenges replaces the challenges the proxy answers. A TLS-ALPN-01
// challenge whose certificate cannot be made is an error, and nothing
// changes.
func (p *Proxy) SetChallenges(list []Challenge) error {
	if len(list) == 0 {
		p.challenges.Store(nil)
		return nil
	}
	c := &challenges{http: map[string]string{}, alpn: map[string]*tls.Certificate{}}
	for _, ch := range list {
		switch ch.Type {
		case HTTP01:
			c.http[ch.Token] = ch.KeyAuth
		case TLSALPN01:
			cert, err := ALPNCertificate(ch.Domain, ch.KeyAuth)
			if err != nil {
				return err
			}
			c.alpn[strings.ToLower(ch.Domain)] = cert
		default:
			return fmt.Errorf("challenge for %s: type %q is neither %s nor %s", ch.Domain, ch.Type, HTTP01, TLSALPN01)
		}
	}
	p.challenges.Store(c)
	return nil
}

// ALPNChallenge returns the TLS-ALPN-01 certificate for a handshake that
// offers only ALPNProto, or nil when it is no such handshake or no
// challenge is pending for its name. A TLS listener's GetCertificate asks
// it first.
func (p *Proxy) ALPNChallenge(hello *tls.ClientHelloInfo) *tls.Certificate {
	if len(hello.SupportedProtos) != 1 || hello.SupportedProtos[0] != ALPNProto {
		return nil
	}
	c := p.challenges.Load()
	if c == nil {
		return nil
	}
	return c.alpn[strings.ToLower(strings.TrimSuffix(hello.ServerName, "."))]
}

// wantsChallenge reports whether a request for uri may be an HTTP-01
// validation the proxy answers (the fast path then hands it to
// ServeHTTP).
func (p *Proxy) wantsChallenge(uri []byte) bool {
	return p.challenges.Load() != nil && len(uri) > len(ChallengePath) && string(uri[:len(ChallengePath)]) == ChallengePath
}

// answerChallenge answers an HTTP-01 validation, before any routing:
// true when r was one.
func (p *Proxy) answerChallenge(w http.ResponseWriter, r *http.Request) bool {
	c := p.challenges.Load()
	if c == nil || (r.Method != http.MethodGet && r.Method != http.MethodHead) {
		return false
	}
	token, ok := strings.CutPrefix(r.URL.Path, ChallengePath)
	if !ok {
		return false
	}
	keyAuth, ok := c.http[token]
	if !ok {
		return false
	}
	w.Header().Set("Content-Type", "text/plain")
	w.Write([]byte(keyAuth))
	return true
}

// idPeACMEIdentifier is the extension of a TLS-ALPN-01 certificate (RFC
// 8737, 3).
var idPeACMEIdentifier = asn1.ObjectIdentifier{1, 3, 6, 1, 5, 5, 7, 1, 31}

// ALPNCertificate makes the self-signed certificate that answers a
// TLS-ALPN-01 challenge for domain: domain its only name, the SHA-256 of
// keyAuth in the critical acmeIdentifier extension.
func ALPNCertificate(domain, keyAuth string) (*tls.Certificate, error) {
	sum := sha256.Sum256([]byte(keyAuth))
	ext, err := asn1.Marshal(sum[:])
	if err != nil {
		return nil, err
	}
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return nil, err
	}
	serial, err := rand.Int(rand.Reader, new(big.Int).Lsh(big.NewInt(1), 127))
	if err != nil {
		return nil, err
	}
	now := time.Now()
	tmpl := &x509.Certificate{
		SerialNumber:    serial,
		Subject:         pkix.Name{CommonName: "shoal ACME challenge"},
		NotBefore:       now.Add(-time.Hour),
		NotAfter:        now.Add(24 * time.Hour),
		DNSNames:        []string{domain},
		ExtraExtensions: []pkix.Extension{{Id: idPeACMEIdentifier, Critical: true, Value: ext}},
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		return nil, fmt.Errorf("challenge certificate for %s: %w", domain, err)
	}
	return &tls.Certificate{Certificate: [][]byte{der}, PrivateKey: key}, nil
}
