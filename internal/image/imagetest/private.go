package imagetest

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"fmt"
	"math/big"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"golang.org/x/crypto/bcrypt"
)

// PrivateRegistryOptions shape StartPrivateRegistry's registry.
type PrivateRegistryOptions struct {
	// Users and their passwords (htpasswd, bcrypt); none: no auth.
	Users map[string]string
	// ClientCert: the registry wants a client certificate signed by the
	// test CA (PrivateRegistry.ClientCert and ClientKey are one).
	ClientCert bool
}

// PrivateRegistry is a docker-registry on loopback behind TLS.
type PrivateRegistry struct {
	Addr   string // "127.0.0.1:<port>"
	CA     []byte // PEM of the CA that signed its certificate
	CAFile string // CA written to a file
	// ClientCert and ClientKey (PEM) are a client certificate signed by
	// the CA.
	ClientCert, ClientKey []byte
	// Transport trusts the CA and presents the client certificate.
	Transport *http.Transport
}

// StartPrivateRegistry runs docker-registry on a free 127.0.0.1 port with
// TLS (a certificate for 127.0.0.1 from a CA made for the test) and, with
// o.Users, htpasswd auth; it stops when the test ends.
func StartPrivateRegistry(t testing.TB, o PrivateRegistryOptions) PrivateRegistry {
	t.Helper()
	if _, err := os.Stat(RegistryBinary); err != nil {
		t.Fatalf("registry: %v (install the docker-registry package)", err)
	}
	dir := t.TempDir()
	caKey, caCert, caPEM := newCA(t)
	srvCert, srvKey := leafCert(t, caKey, caCert, "127.0.0.1", x509.ExtKeyUsageServerAuth)
	cliCert, cliKey := leafCert(t, caKey, caCert, "shoal-test-client", x509.ExtKeyUsageClientAuth)
	write := func(name string, b []byte) string {
		p := filepath.Join(dir, name)
		if err := os.WriteFile(p, b, 0o600); err != nil {
			t.Fatal(err)
		}
		return p
	}
	reg := PrivateRegistry{CA: caPEM, CAFile: write("ca.crt", caPEM), ClientCert: cliCert, ClientKey: cliKey}

	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatalf("registry: free port: %v", err)
	}
	reg.Addr = l.Addr().String()
	l.Close()

	var cfg strings.Builder
	fmt.Fprintf(&cfg, "version: 0.1\nlog:\n  level: warn\nstorage:\n  filesystem:\n    rootdirectory: %s\n", filepath.Join(dir, "data"))
	fmt.Fprintf(&cfg, "http:\n  addr: %s\n  tls:\n    certificate: %s\n    key: %s\n", reg.Addr, write("server.crt", srvCert), write("server.key", srvKey))
	if o.ClientCert {
		fmt.Fprintf(&cfg, "    clientcas:\n      - %s\n", reg.CAFile)
	}
	if len(o.Users) > 0 {
		var ht strings.Builder
		for u, p := range o.Users {
			h, err := bcrypt.GenerateFromPassword([]byte(p), bcrypt.MinCost)
			if err != nil {
				t.Fatal(err)
			}
			fmt.Fprintf(&ht, "%s:%s\n", u, h)
		}
		fmt.Fprintf(&cfg, "auth:\n  htpasswd:\n    realm: shoal-test\n    path: %s\n", write("htpasswd", []byte(ht.String())))
	}

	pool := x509.NewCertPool()
	pool.AppendCertsFromPEM(caPEM)
	pair, err := tls.X509KeyPair(cliCert, cliKey)
	if err != nil {
		t.Fatal(err)
	}
	reg.Transport = &http.Transport{TLSClientConfig: &tls.Config{RootCAs: pool, Certificates: []tls.Certificate{pair}}}
	t.Cleanup(reg.Transport.CloseIdleConnections)
	want := http.StatusOK
	if len(o.Users) > 0 {
		want = http.StatusUnauthorized
	}
	runRegistry(t, dir, cfg.String(), "https://"+reg.Addr+"/v2/", &http.Client{Transport: reg.Transport}, want)
	return reg
}

func newCA(t testing.TB) (*ecdsa.PrivateKey, *x509.Certificate, []byte) {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{
		SerialNumber:          big.NewInt(1),
		Subject:               pkix.Name{CommonName: "shoal test CA"},
		NotBefore:             time.Now().Add(-time.Hour),
		NotAfter:              time.Now().Add(24 * time.Hour),
		IsCA:                  true,
		BasicConstraintsValid: true,
		KeyUsage:              x509.KeyUsageCertSign | x509.KeyUsageDigitalSignature,
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		t.Fatal(err)
	}
	cert, err := x509.ParseCertificate(der)
	if err != nil {
		t.Fatal(err)
	}
	return key, cert, pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der})
}

// leafCert makes a certificate for cn (an IP address is also its SAN)
// signed by the CA, as PEM certificate and key.
func leafCert(t testing.TB, caKey *ecdsa.PrivateKey, ca *x509.Certificate, cn string, usage x509.ExtKeyUsage) ([]byte, []byte) {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	serial, _ := rand.Int(rand.Reader, big.NewInt(1<<62))
	tmpl := &x509.Certificate{
		SerialNumber: serial,
		Subject:      pkix.Name{CommonName: cn},
		NotBefore:    time.Now().Add(-time.Hour),
		NotAfter:     time.Now().Add(24 * time.Hour),
		KeyUsage:     x509.KeyUsageDigitalSignature,
		ExtKeyUsage:  []x509.ExtKeyUsage{usage},
	}
	if ip := net.ParseIP(cn); ip != nil {
		tmpl.IPAddresses = []net.IP{ip}
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, ca, &key.PublicKey, caKey)
	if err != nil {
		t.Fatal(err)
	}
	kb, err := x509.MarshalECPrivateKey(key)
	if err != nil {
		t.Fatal(err)
	}
	return pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}), pem.EncodeToMemory(&pem.Block{Type: "EC PRIVATE KEY", Bytes: kb})
}
