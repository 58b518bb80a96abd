package e2e

import (
	"context"
	"crypto/tls"
	"encoding/json"
	"io"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/shoal-run/shoal/internal/api/types"
	"github.com/shoal-run/shoal/internal/certs/certstest"
)

// edgeClient sends every request to addr, whatever its URL's host, over
// TLS trusting ca alone when ca is set; it follows no redirect.
func edgeClient(addr string, ca *certstest.CA) *http.Client {
	tr := &http.Transport{
		DialContext: func(ctx context.Context, network, _ string) (net.Conn, error) {
			var d net.Dialer
			return d.DialContext(ctx, network, addr)
		},
		DisableKeepAlives: true,
	}
	if ca != nil {
		tr.TLSClientConfig = &tls.Config{RootCAs: ca.Pool()}
	}
	return &http.Client{Transport: tr, Timeout: time.Minute,
		CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}
}

func edgeGet(c *http.Client, url string) (int, string, http.Header, error) {
	resp, err := c.Get(url)
	if err != nil {
		return 0, "", nil, err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b), resp.Header, err
}

// An app with its own domain is served over HTTPS with a certificate added
// from files (a CA the test made), by a client that trusts that CA alone;
// plain HTTP to the domain is redirected, HTTPS answers carry HSTS, a
// wildcard serves the apps under --domain, another app cannot take the
// domain, a daemon killed with SIGKILL leaves HTTPS served, before and
// after its restart, and a proxy process that dies is replaced with its
// TLS listener and certificates.
func TestEdgeHTTPSWithOwnDomain(t *testing.T) {
	d := startDaemon(t, "--proxy-tls", "127.0.0.1:0", "--domain", "apps.test")
	d.exampleImage("hello")
	ca := certstest.NewCA(t, "shoal e2e CA")
	dir := t.TempDir()
	write := func(name string, b []byte) string {
		p := filepath.Join(dir, name)
		if err := os.WriteFile(p, b, 0o600); err != nil {
			t.Fatal(err)
		}
		return p
	}
	cp, kp := ca.Issue(t, []string{"www.example.test", "example.test"}, time.Time{}, time.Time{})
	d.must("cert", "add", "www.example.test", "--cert", write("www.pem", cp), "--key", write("www.key", kp))
	wp, wk := ca.Issue(t, []string{"*.apps.test"}, time.Time{}, time.Time{})
	d.must("cert", "add", "*.apps.test", "--cert", write("wild.pem", wp), "--key", write("wild.key", wk))
	// A key that does not go with its certificate is refused, naming the file.
	if r := d.shoal("cert", "add", "example.test", "--cert", write("www.pem", cp), "--key", write("wild.key", wk)); r.code != 2 || !strings.Contains(r.stderr, "wild.key") {
		t.Fatalf("cert add with another key: exit %d %q", r.code, r.stderr)
	}
	var list []types.Cert
	if err := json.Unmarshal([]byte(d.must("cert", "ls", "-o", "json")), &list); err != nil || len(list) != 2 ||
		list[0].Domains[0] != "*.apps.test" || list[1].Source != "file" || list[1].Issuer != "shoal e2e CA" {
		t.Fatalf("cert ls: %+v, %v", list, err)
	}

	d.deploy(strings.Replace(manifest("1m", "10m"), `name = "hello"`, `name = "hello"`+"\ndomains = [\"www.example.test\"]", 1))
	var h types.Health
	if err := json.Unmarshal([]byte(d.must("info", "--output", "json")), &h); err != nil || h.ProxyTLS == "" {
		t.Fatalf("info: %+v, %v: no HTTPS listener", h, err)
	}
	_, tlsPort, _ := net.SplitHostPort(h.ProxyTLS)
	secure := edgeClient(h.ProxyTLS, ca)
	plain := edgeClient(h.Proxy, nil)
	checkHTTPS := func(when string) {
		t.Helper()
		for _, host := range []string{"www.example.test", "hello.apps.test"} {
			code, body, hdr, err := edgeGet(secure, "https://"+host+"/")
			if err != nil || code != 200 || !strings.HasPrefix(body, "hello from ") {
				t.Fatalf("%s: https://%s/: %d %q %v", when, host, code, body, err)
			}
			if hdr.Get("Strict-Transport-Security") != "max-age=31536000" {
				t.Fatalf("%s: https://%s/: HSTS %q", when, host, hdr.Get("Strict-Transport-Security"))
			}
		}
	}
	checkHTTPS("after the deploy")
	code, _, hdr, err := edgeGet(plain, "http://www.example.test/a?b=c")
	if want := "https://www.example.test:" + tlsPort + "/a?b=c"; err != nil || code != http.StatusPermanentRedirect || hdr.Get("Location") != want {
		t.Fatalf("http://www.example.test/a?b=c: %d to %q, %v; want 308 to %s", code, hdr.Get("Location"), err, want)
	}
	if code, body, _, err := edgeGet(plain, "http://hello.localhost/"); err != nil || code != 200 || !strings.HasPrefix(body, "hello from ") {
		t.Fatalf("http://hello.localhost/: %d %q %v", code, body, err)
	}

	// Another app cannot take the domain.
	f := filepath.Join(t.TempDir(), "shoal.toml")
	other := strings.Replace(manifest("1m", "10m"), `name = "hello"`, `name = "thief"`+"\ndomains = [\"www.example.test\"]", 1)
	os.WriteFile(f, []byte(other), 0o644)
	if r := d.shoal("app", "deploy", "-f", f); r.code == 0 || !strings.Contains(r.stderr, "domains") || !strings.Contains(r.stderr, `"hello"`) {
		t.Fatalf("a second app claiming www.example.test: exit %d %q", r.code, r.stderr)
	}

	// SIGKILL: the proxy process serves HTTPS while the daemon is away,
	// and the next daemon adopts it with its TLS listener.
	d.stop(syscall.SIGKILL)
	checkHTTPS("with the daemon killed")
	d.start()
	checkHTTPS("after the restart")
	var h2 types.Health
	if err := json.Unmarshal([]byte(d.must("info", "--output", "json")), &h2); err != nil || h2.ProxyTLS != h.ProxyTLS {
		t.Fatalf("HTTPS listener after the restart: %q, %v; want %s", h2.ProxyTLS, err, h.ProxyTLS)
	}
	// A proxy process that dies is replaced on the same addresses, and
	// the new one gets the certificates again.
	procs := d.proxyProcs()
	if len(procs) != 1 {
		t.Fatalf("proxy processes: %v, want one", procs)
	}
	syscall.Kill(procs[0], syscall.SIGKILL)
	waitFor(t, "HTTPS served by a new proxy process", func() bool {
		now := d.proxyProcs()
		if len(now) != 1 || now[0] == procs[0] {
			return false
		}
		code, _, _, err := edgeGet(secure, "https://www.example.test/")
		return err == nil && code == 200
	})
	checkHTTPS("from the new proxy process")
	// A certificate removed is no longer served.
	d.must("cert", "rm", "*.apps.test")
	waitFor(t, "hello.apps.test without a certificate", func() bool {
		_, _, _, err := edgeGet(secure, "https://hello.apps.test/")
		return err != nil
	})
}
