package proxy

import (
	"bufio"
	"crypto/tls"
	"io"
	"net/http"
	"testing"

	"golang.org/x/net/http2"

	"github.com/shoal-run/shoal/internal/route"
)

// On the TLS listener, a request whose Host the connection's certificate
// does not cover (a connection made for app A asking for app B) is
// answered 421 Misdirected Request, by the HTTP/1.1 engine and over h2;
// a Host the same certificate covers (a wildcard's) is served.
func TestEdgeMisdirectedRequest(t *testing.T) {
	f := newTLSFront(t)
	ra := routeTo("a", namedBackend(t, "a"))
	ra.Domains = []string{"a.example.test"}
	rb := routeTo("b", namedBackend(t, "b"))
	rb.Domains = []string{"b.example.test"}
	f.p.Update([]route.Route{ra, rb})
	f.p.SetCerts([]route.Cert{f.cert(t, "a.example.test"), f.cert(t, "b.example.test"), f.cert(t, "*.apps.test")})

	h1 := func(sni, host string) (int, string) {
		c, err := f.dialTLS(t, sni, &tls.Config{NextProtos: []string{"http/1.1"}})
		if err != nil {
			t.Fatalf("handshake for %s: %v", sni, err)
		}
		io.WriteString(c, "GET / HTTP/1.1\r\nHost: "+host+"\r\n\r\n")
		resp, err := http.ReadResponse(bufio.NewReader(c), nil)
		if err != nil {
			t.Fatalf("GET https://%s over %s's connection: %v", host, sni, err)
		}
		defer resp.Body.Close()
		return resp.StatusCode, body(resp)
	}
	h2 := func(sni, host string) (int, string) {
		c, err := f.dialTLS(t, sni, &tls.Config{NextProtos: []string{"h2"}})
		if err != nil {
			t.Fatalf("handshake for %s: %v", sni, err)
		}
		if p := c.ConnectionState().NegotiatedProtocol; p != "h2" {
			t.Fatalf("ALPN %q, want h2", p)
		}
		cc, err := (&http2.Transport{}).NewClientConn(c)
		if err != nil {
			t.Fatal(err)
		}
		req, _ := http.NewRequest("GET", "https://"+host+"/", nil)
		resp, err := cc.RoundTrip(req)
		if err != nil {
			t.Fatalf("h2 GET https://%s over %s's connection: %v", host, sni, err)
		}
		defer resp.Body.Close()
		return resp.StatusCode, body(resp)
	}
	for name, get := range map[string]func(sni, host string) (int, string){"HTTP/1.1": h1, "h2": h2} {
		for _, c := range []struct {
			sni, host string
			code      int
			body      string
		}{
			{"a.example.test", "a.example.test", 200, "a"},
			{"a.example.test", "A.example.test.:443", 200, "a"},
			{"a.example.test", "b.example.test", http.StatusMisdirectedRequest, ""},
			{"b.example.test", "a.example.test", http.StatusMisdirectedRequest, ""},
			{"a.apps.test", "b.apps.test", 200, "b"}, // one wildcard covers both
		} {
			code, b := get(c.sni, c.host)
			if code != c.code || (c.body != "" && b != c.body) {
				t.Errorf("%s: Host %s on a connection for %s: %d %q, want %d %q", name, c.host, c.sni, code, b, c.code, c.body)
			}
		}
	}
}
