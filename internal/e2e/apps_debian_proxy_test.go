package e2e

import (
	"io"
	"net/http"
	"regexp"
	"strings"
	"testing"
)

// TestDebianApachePHPBehindTLSTerminator: Debian's Apache with mod_php,
// deployed with its example shoal.toml on a daemon that trusts a TLS
// terminator on loopback (--trusted-proxies), sees the request as the
// terminator saw it (https, in phpinfo()'s $_SERVER), and phpinfo(), which
// shows the replica's environment, shows no self API token there (the
// example keeps it a file, /run/secrets/SHOAL_TOKEN).
func TestDebianApachePHPBehindTLSTerminator(t *testing.T) {
	d := startDaemon(t, "--trusted-proxies", "127.0.0.1,::1")
	proxy := d.debianApp("apache-php")
	req, err := http.NewRequest(http.MethodGet, "http://"+proxy+"/", nil)
	if err != nil {
		t.Fatal(err)
	}
	req.Host = "apache-php.localhost"
	req.Header.Set("X-Forwarded-Proto", "https")
	req.Header.Set("X-Forwarded-For", "203.0.113.7")
	resp, err := client.Do(req)
	if err != nil {
		t.Fatalf("GET / through the proxy: %v", err)
	}
	b, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	body := string(b)
	if resp.StatusCode != 200 || !strings.Contains(body, "PHP Version") {
		t.Fatalf("GET /: %d, %d bytes, want 200 and phpinfo():\n%.400s", resp.StatusCode, len(body), body)
	}
	server := func(name string) string {
		m := regexp.MustCompile(`\$_SERVER\['` + name + `'\]</td><td class="v">([^<]*)<`).FindStringSubmatch(body)
		if m == nil {
			return "(none)"
		}
		return m[1]
	}
	if got := server("HTTP_X_FORWARDED_PROTO"); got != "https" {
		t.Errorf("the app sees X-Forwarded-Proto %q behind a trusted proxy that said https", got)
	}
	if got := server("HTTP_X_FORWARDED_FOR"); !strings.HasPrefix(got, "203.0.113.7") {
		t.Errorf("the app sees X-Forwarded-For %q; want the trusted proxy's client 203.0.113.7 first", got)
	}
	if !strings.Contains(body, "SHOAL_APP") {
		t.Fatalf("phpinfo() shows no SHOAL_APP: it does not show the replica's environment:\n%.2000s", body)
	}
	if strings.Contains(body, "SHOAL_TOKEN") {
		t.Errorf("phpinfo() shows SHOAL_TOKEN: the self API token is in the replica's environment")
	}
}
