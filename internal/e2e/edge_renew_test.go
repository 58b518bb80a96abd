package e2e

import (
	"context"
	"crypto/tls"
	"encoding/json"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/shoal-run/shoal/internal/acme/pebbletest"
	"github.com/shoal-run/shoal/internal/api/types"
)

// servedSerial is the serial number of the certificate the proxy's TLS
// listener at addr serves for name, verified against roots ("" when the
// handshake fails).
func servedSerial(addr, name string, roots *tls.Config) string {
	cfg := roots.Clone()
	cfg.ServerName = name
	c, err := tls.DialWithDialer(&net.Dialer{Timeout: 30 * time.Second}, "tcp", addr, cfg)
	if err != nil {
		return ""
	}
	defer c.Close()
	return c.ConnectionState().PeerCertificates[0].SerialNumber.String()
}

// The whole path with real clients: an app's own domain gets its
// certificate from Pebble; Debian's curl, trusting Pebble's root alone,
// reaches the app over HTTPS and speaks HTTP/2 with it (ALPN h2); plain
// HTTP is redirected to HTTPS; and, Pebble's certificates living 90 s,
// the certificate is renewed at two thirds of its life and the proxy
// serves the new one, to curl over HTTP/2 too.
func TestEdgeCurlH2AndRenewal(t *testing.T) {
	curl, err := exec.LookPath("curl")
	if err != nil {
		t.Fatalf("curl (Debian's curl; scripts/install-deps.sh test): %v", err)
	}
	plainFw, tlsFw := newForwarder(t), newForwarder(t)
	peb := pebbletest.Start(t, pebbletest.Options{HTTPPort: plainFw.port(), TLSPort: tlsFw.port(), Validity: 90 * time.Second})
	d := startDaemon(t, "--proxy-tls", "127.0.0.1:0", "--acme-ca", peb.Directory, "--acme-ca-root", peb.APIRoot)
	var h types.Health
	if err := json.Unmarshal([]byte(d.must("info", "--output", "json")), &h); err != nil || h.ProxyTLS == "" {
		t.Fatalf("info: %+v, %v: no HTTPS listener", h, err)
	}
	plainFw.target.Store(&h.Proxy)
	tlsFw.target.Store(&h.ProxyTLS)
	d.exampleImage("hello")
	const domain = "curl.shoal.test"
	d.deploy(strings.Replace(manifest("1m", "10m"), `name = "hello"`, `name = "hello"`+"\ndomains = [\""+domain+"\"]", 1))

	var first types.Cert
	waitFor(t, "the certificate of "+domain+" from Pebble", func() bool {
		var ok bool
		first, ok = d.certOf(domain)
		return ok && !first.Pending
	})
	pool, rootPEM, err := peb.IssuingRoot(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	rootFile := filepath.Join(t.TempDir(), "pebble-root.pem")
	if err := os.WriteFile(rootFile, rootPEM, 0o644); err != nil {
		t.Fatal(err)
	}
	_, tlsPort, _ := net.SplitHostPort(h.ProxyTLS)
	_, plainPort, _ := net.SplitHostPort(h.Proxy)
	// curlH2 GETs https://domain/ with curl over HTTP/2 and returns the
	// HTTP version, the status and the body.
	curlH2 := func() (version, code, body string, err error) {
		out, err := exec.Command(curl, "-sS", "--http2", "--max-time", "60", "--cacert", rootFile,
			"--resolve", domain+":"+tlsPort+":127.0.0.1", "-w", "\n%{http_version} %{http_code}",
			"https://"+domain+":"+tlsPort+"/").CombinedOutput()
		s := string(out)
		i := strings.LastIndexByte(s, '\n')
		if err != nil || i < 0 {
			return "", "", s, err
		}
		version, code, _ = strings.Cut(s[i+1:], " ")
		return version, code, s[:i], nil
	}
	waitFor(t, "curl --http2 https://"+domain+"/", func() bool {
		_, code, _, err := curlH2()
		return err == nil && code == "200"
	})
	if v, code, body, err := curlH2(); err != nil || v != "2" || code != "200" || !strings.HasPrefix(body, "hello from ") {
		t.Fatalf("curl --http2 https://%s/: HTTP/%s %s %q, %v", domain, v, code, body, err)
	}
	out, err := exec.Command(curl, "-sS", "-o", "/dev/null", "-w", "%{http_code} %{redirect_url}", "--max-time", "60",
		"--resolve", domain+":"+plainPort+":127.0.0.1", "http://"+domain+":"+plainPort+"/p?q=1").CombinedOutput()
	if want := "308 https://" + domain + ":" + tlsPort + "/p?q=1"; err != nil || string(out) != want {
		t.Fatalf("curl http://%s/p?q=1: %q, %v; want %q", domain, out, err, want)
	}

	// Renewal: at two thirds of the certificate's life, by the daemon
	// alone; the new certificate is served.
	cfg := &tls.Config{RootCAs: pool}
	firstSerial := servedSerial(h.ProxyTLS, domain, cfg)
	if firstSerial == "" {
		t.Fatalf("no certificate served for %s", domain)
	}
	// (Past its first minute: a generous bound, polled.)
	var second types.Cert
	for deadline := time.Now().Add(4 * time.Minute); ; time.Sleep(500 * time.Millisecond) {
		var ok bool
		second, ok = d.certOf(domain)
		if ok && !second.Pending && second.NotAfter.After(first.NotAfter) {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the certificate of %s was not renewed: %+v (first: %+v)", domain, second, first)
		}
	}
	if second.Source != "acme" || second.LastError != "" || !second.RenewedAt.After(first.RenewedAt) {
		t.Fatalf("cert ls after the renewal: %+v (before: %+v)", second, first)
	}
	waitFor(t, "the renewed certificate served", func() bool {
		s := servedSerial(h.ProxyTLS, domain, cfg)
		return s != "" && s != firstSerial
	})
	if v, code, body, err := curlH2(); err != nil || v != "2" || code != "200" || !strings.HasPrefix(body, "hello from ") {
		t.Fatalf("curl --http2 https://%s/ after the renewal: HTTP/%s %s %q, %v", domain, v, code, body, err)
	}
	if evs := d.must("events", "--app", "hello"); strings.Count(evs, "certificate for "+domain+" issued") < 2 {
		t.Fatalf("events lack the renewal's:\n%s", evs)
	}
}
