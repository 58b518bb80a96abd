package image

import (
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"io/fs"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"sync"

	"github.com/google/go-containerregistry/pkg/v1/remote"

	"github.com/shoal-run/shoal/internal/errdefs"
)

// DefaultCertsDirs are where a registry's own CA and client certificate
// are looked for, the containers and Docker way: a folder per registry
// named "host" or "host:port", whose *.crt files are CAs (beside the
// system's) and whose *.cert files, each with the *.key of the same name,
// are client certificates (Docker's ca.crt, client.cert, client.key).
var DefaultCertsDirs = []string{"/etc/containers/certs.d", "/etc/docker/certs.d"}

// hostTLS is a transport that gives each registry host the TLS
// configuration its certs.d folders and the pull's own CA make: requests
// to other hosts (a blob store a registry redirects to) get the system's.
type hostTLS struct {
	base  *http.Transport
	ca    []byte
	dirs  []string
	mu    sync.Mutex
	hosts map[string]http.RoundTripper
	// asked holds the hosts that asked for a client certificate none of
	// theirs matched; answered those that answered a request over TLS.
	asked, answered map[string]bool
}

func newHostTLS(ca []byte, dirs []string) (*hostTLS, error) {
	base, ok := remote.DefaultTransport.(*http.Transport)
	if !ok {
		base = http.DefaultTransport.(*http.Transport)
	}
	if len(ca) > 0 {
		if _, err := certPool(nil, ca); err != nil {
			return nil, errdefs.Invalid("ca", "%v", err)
		}
	}
	return &hostTLS{base: base, ca: ca, dirs: dirs, hosts: map[string]http.RoundTripper{},
		asked: map[string]bool{}, answered: map[string]bool{}}, nil
}

func (h *hostTLS) RoundTrip(req *http.Request) (*http.Response, error) {
	t, err := h.forHost(req.URL.Host)
	if err != nil {
		return nil, err
	}
	resp, err := t.RoundTrip(req)
	if err == nil && req.URL.Scheme == "https" {
		h.mu.Lock()
		h.answered[req.URL.Host] = true
		h.mu.Unlock()
	}
	return resp, err
}

// noClientCert reports whether host asked for a client certificate this
// pull had not, and never answered a request over TLS: its refusal of
// the handshake may reach the client only as a closed connection.
func (h *hostTLS) noClientCert(host string) bool {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.asked[host] && !h.answered[host]
}

func (h *hostTLS) forHost(host string) (http.RoundTripper, error) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if t, ok := h.hosts[host]; ok {
		return t, nil
	}
	cas, certs, err := h.hostFiles(host)
	if err != nil {
		return nil, err
	}
	if len(cas) == 0 && len(certs) == 0 && len(h.ca) == 0 {
		h.hosts[host] = h.base
		return h.base, nil
	}
	pool, err := x509.SystemCertPool()
	if err != nil {
		pool = x509.NewCertPool()
	}
	if len(h.ca) > 0 {
		if pool, err = certPool(pool, h.ca); err != nil {
			return nil, errdefs.Invalid("ca", "%v", err)
		}
	}
	for _, p := range cas {
		b, err := os.ReadFile(p)
		if err == nil {
			pool, err = certPool(pool, b)
		}
		if err != nil {
			return nil, fmt.Errorf("registry %s: CA %s: %w", host, p, err)
		}
	}
	t := h.base.Clone()
	t.TLSClientConfig = &tls.Config{RootCAs: pool, MinVersion: tls.VersionTLS12,
		// As crypto/tls picks from Certificates, noting a request none
		// matches.
		GetClientCertificate: func(cri *tls.CertificateRequestInfo) (*tls.Certificate, error) {
			for i := range certs {
				if cri.SupportsCertificate(&certs[i]) == nil {
					return &certs[i], nil
				}
			}
			h.mu.Lock()
			h.asked[host] = true
			h.mu.Unlock()
			return new(tls.Certificate), nil
		}}
	h.hosts[host] = t
	return t, nil
}

// hostFiles lists the CAs of host's certs.d folders and loads its client
// certificates.
func (h *hostTLS) hostFiles(host string) (cas []string, certs []tls.Certificate, err error) {
	names := []string{host}
	if bare, ok := strings.CutSuffix(host, ":443"); ok {
		names = append(names, bare)
	}
	for _, d := range h.dirs {
		for _, n := range names {
			dir := filepath.Join(d, n)
			ents, err := os.ReadDir(dir)
			if errors.Is(err, fs.ErrNotExist) {
				continue
			}
			if err != nil {
				return nil, nil, fmt.Errorf("registry %s: %w", host, err)
			}
			for _, e := range ents {
				p := filepath.Join(dir, e.Name())
				switch filepath.Ext(e.Name()) {
				case ".crt":
					cas = append(cas, p)
				case ".cert":
					key := strings.TrimSuffix(p, ".cert") + ".key"
					c, err := tls.LoadX509KeyPair(p, key)
					if err != nil {
						return nil, nil, fmt.Errorf("registry %s: client certificate %s (key %s): %w", host, p, key, err)
					}
					certs = append(certs, c)
				}
			}
		}
	}
	return cas, certs, nil
}

// certPool adds the PEM certificates in b to pool (a new one if nil).
func certPool(pool *x509.CertPool, b []byte) (*x509.CertPool, error) {
	if pool == nil {
		pool = x509.NewCertPool()
	}
	if !pool.AppendCertsFromPEM(b) {
		return nil, errors.New("no PEM certificate in it")
	}
	return pool, nil
}

// closeIdle closes the idle connections of the transports made for this
// pull (the shared default's stay).
func (h *hostTLS) closeIdle() {
	h.mu.Lock()
	defer h.mu.Unlock()
	for _, t := range h.hosts {
		if t, ok := t.(*http.Transport); ok && t != h.base {
			t.CloseIdleConnections()
		}
	}
}
