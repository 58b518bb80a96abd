package proxy

import (
	"io"
	"net/http"
	"strings"
	"testing"
)

// Hop-by-hop fields, those of hopHeaders and those a Connection field
// lists, reach neither the replica nor the client, whichever engine
// forwards the request: the fast path and net/http's leg (HTTP/1.0, a
// chunked upload).
func TestHopByHopFieldsRemoved(t *testing.T) {
	f := newFront(t, Options{})
	seen := make(chan http.Header, 1)
	f.p.SetRoute(routeTo("a", newBackend(t, func(w http.ResponseWriter, r *http.Request) {
		io.Copy(io.Discard, r.Body)
		seen <- r.Header.Clone()
		h := w.Header()
		h.Set("Connection", "X-Secret-Answer")
		h.Set("X-Secret-Answer", "1")
		h.Set("Keep-Alive", "timeout=5")
		h.Set("Proxy-Connection", "keep-alive")
		h.Set("Proxy-Authenticate", "Basic")
		h.Set("X-Kept", "yes")
	})))
	hop := "Connection: keep-alive, X-Secret\r\nX-Secret: 1\r\nKeep-Alive: 300\r\nProxy-Connection: keep-alive\r\n" +
		"Proxy-Authorization: Basic eA==\r\nTe: trailers\r\nX-Kept: yes\r\n"
	for _, tc := range []struct{ name, req string }{
		{"fast", "GET / HTTP/1.1\r\nHost: a.localhost\r\n" + hop + "\r\n"},
		{"net/http", "GET / HTTP/1.0\r\nHost: a.localhost\r\n" + hop + "\r\n"},
		{"chunked", "POST / HTTP/1.1\r\nHost: a.localhost\r\nTransfer-Encoding: chunked\r\n" + hop + "\r\n3\r\nabc\r\n0\r\n\r\n"},
	} {
		rc := f.dial(t)
		rc.send(tc.req)
		resp, body := rc.read("GET")
		if resp.StatusCode != 200 {
			t.Fatalf("%s: %d %q", tc.name, resp.StatusCode, body)
		}
		h := recv(t, seen, "the replica's request")
		for _, k := range []string{"X-Secret", "Keep-Alive", "Proxy-Connection", "Proxy-Authorization", "Te"} {
			if v := h.Values(k); len(v) > 0 {
				t.Errorf("%s: the replica got %s: %q", tc.name, k, v)
			}
		}
		if h.Get("X-Kept") != "yes" {
			t.Errorf("%s: the replica did not get X-Kept: %v", tc.name, h)
		}
		for _, k := range []string{"X-Secret-Answer", "Keep-Alive", "Proxy-Connection", "Proxy-Authenticate"} {
			if v := resp.Header.Values(k); len(v) > 0 {
				t.Errorf("%s: the client got %s: %q", tc.name, k, v)
			}
		}
		if v := resp.Header.Values("Connection"); len(v) > 0 && v[0] != "close" && v[0] != "keep-alive" {
			t.Errorf("%s: the client got Connection: %q", tc.name, v)
		}
		if resp.Header.Get("X-Kept") != "yes" {
			t.Errorf("%s: the client did not get X-Kept: %v", tc.name, resp.Header)
		}
	}
}

// The fast path's look-up knows every name of the one list, in any case,
// and no other.
func TestHopByHopName(t *testing.T) {
	for _, h := range hopHeaders {
		for _, k := range []string{h, strings.ToLower(h), strings.ToUpper(h)} {
			if !hopByHopName([]byte(k)) {
				t.Errorf("hopByHopName(%q) = false", k)
			}
		}
	}
	for _, k := range []string{"", "T", "Tee", "Trailers", "Content-Length", "X-Forwarded-For", "Proxy-Authorizations"} {
		if hopByHopName([]byte(k)) {
			t.Errorf("hopByHopName(%q) = true", k)
		}
	}
}

// From a trusted proxy (a TLS terminator in front of this one), the
// forwarded fields it sent reach the replica, X-Forwarded-For extended with
// it, on either engine; X-Real-IP and Forwarded name the client it saw.
func TestServeForwardedFromTrustedProxy(t *testing.T) {
	trust, err := ParseTrustList([]string{"127.0.0.0/8"})
	if err != nil {
		t.Fatal(err)
	}
	f := newFront(t, Options{TrustedProxies: trust})
	seen := make(chan http.Header, 1)
	f.p.SetRoute(routeTo("a", newBackend(t, func(w http.ResponseWriter, r *http.Request) {
		io.Copy(io.Discard, r.Body)
		seen <- r.Header.Clone()
	})))
	sent := "X-Forwarded-For: 198.51.100.7\r\nX-Forwarded-Proto: https\r\nX-Forwarded-Host: www.example.org\r\n"
	for _, tc := range []struct{ name, req string }{
		{"fast", "GET / HTTP/1.1\r\nHost: a.localhost\r\n" + sent + "\r\n"},
		{"net/http", "GET / HTTP/1.0\r\nHost: a.localhost\r\n" + sent + "\r\n"},
		{"chunked", "POST / HTTP/1.1\r\nHost: a.localhost\r\nTransfer-Encoding: chunked\r\n" + sent + "\r\n3\r\nabc\r\n0\r\n\r\n"},
	} {
		rc := f.dial(t)
		rc.send(tc.req)
		if resp, body := rc.read("GET"); resp.StatusCode != 200 {
			t.Fatalf("%s: %d %q", tc.name, resp.StatusCode, body)
		}
		h := recv(t, seen, "the replica's request")
		for k, want := range map[string]string{
			"X-Forwarded-For":   "198.51.100.7, 127.0.0.1",
			"X-Forwarded-Proto": "https",
			"X-Forwarded-Host":  "www.example.org",
			"X-Real-Ip":         "198.51.100.7",
			"Forwarded":         "for=198.51.100.7;proto=https",
		} {
			if got := h.Values(k); len(got) != 1 || got[0] != want {
				t.Errorf("%s: %s %q, want %q", tc.name, k, got, want)
			}
		}
	}
}

// appendForwarded, for both its instantiations (the fast path's bytes,
// net/http's strings): what a replica is told of a request's client, from
// a peer that is trusted or not.
func TestAppendForwarded(t *testing.T) {
	trust, err := ParseTrustList([]string{"10.0.0.0/8", "192.0.2.1", "2001:db8::/32"})
	if err != nil {
		t.Fatal(err)
	}
	type sent = sentFields[string]
	for _, c := range []struct {
		name     string
		peer     string
		tls, hop bool
		in       sent
		want     string
	}{
		{name: "untrusted, nothing sent", peer: "203.0.113.5",
			want: "X-Forwarded-For: 203.0.113.5\r\nX-Forwarded-Host: a.test\r\nX-Forwarded-Proto: http\r\n" +
				"X-Real-Ip: 203.0.113.5\r\nForwarded: for=203.0.113.5;proto=http\r\n"},
		{name: "untrusted, all spoofed", peer: "203.0.113.5", tls: true,
			in: sent{xff: []string{"1.1.1.1"}, host: []string{"x"}, proto: []string{"http"}, realIP: []string{"1.1.1.1"}, fwd: []string{"for=1.1.1.1"}},
			want: "X-Forwarded-For: 203.0.113.5\r\nX-Forwarded-Host: a.test\r\nX-Forwarded-Proto: https\r\n" +
				"X-Real-Ip: 203.0.113.5\r\nForwarded: for=203.0.113.5;proto=https\r\n"},
		{name: "trusted, nothing sent", peer: "10.1.2.3",
			want: "X-Forwarded-For: 10.1.2.3\r\nX-Forwarded-Host: a.test\r\nX-Forwarded-Proto: http\r\n" +
				"X-Real-Ip: 10.1.2.3\r\nForwarded: for=10.1.2.3;proto=http\r\n"},
		{name: "trusted TLS terminator", peer: "192.0.2.1",
			in: sent{xff: []string{"203.0.113.9, 10.0.0.2"}, host: []string{"www.example.org"}, proto: []string{"https"}},
			want: "X-Forwarded-For: 203.0.113.9, 10.0.0.2, 192.0.2.1\r\nX-Forwarded-Host: www.example.org\r\nX-Forwarded-Proto: https\r\n" +
				"X-Real-Ip: 203.0.113.9\r\nForwarded: for=203.0.113.9;proto=https\r\n"},
		{name: "trusted, the client spoofs an entry before it", peer: "192.0.2.1",
			in: sent{xff: []string{"6.6.6.6", "203.0.113.9"}, proto: []string{" https , http"}},
			want: "X-Forwarded-For: 6.6.6.6, 203.0.113.9, 192.0.2.1\r\nX-Forwarded-Host: a.test\r\nX-Forwarded-Proto:  https , http\r\n" +
				"X-Real-Ip: 203.0.113.9\r\nForwarded: for=203.0.113.9;proto=https\r\n"},
		{name: "trusted, all proxies", peer: "10.0.0.1",
			in: sent{xff: []string{"10.0.0.3,10.0.0.2"}},
			want: "X-Forwarded-For: 10.0.0.3,10.0.0.2, 10.0.0.1\r\nX-Forwarded-Host: a.test\r\nX-Forwarded-Proto: http\r\n" +
				"X-Real-Ip: 10.0.0.3\r\nForwarded: for=10.0.0.3;proto=http\r\n"},
		{name: "trusted, not an address", peer: "10.0.0.1",
			in: sent{xff: []string{"unknown, 10.0.0.2"}},
			want: "X-Forwarded-For: unknown, 10.0.0.2, 10.0.0.1\r\nX-Forwarded-Host: a.test\r\nX-Forwarded-Proto: http\r\n" +
				"X-Real-Ip: 10.0.0.2\r\nForwarded: for=10.0.0.2;proto=http\r\n"},
		{name: "trusted IPv6 client", peer: "2001:db8::1",
			in: sent{xff: []string{"2001:db9::7"}, proto: []string{"https"}},
			want: "X-Forwarded-For: 2001:db9::7, 2001:db8::1\r\nX-Forwarded-Host: a.test\r\nX-Forwarded-Proto: https\r\n" +
				"X-Real-Ip: 2001:db9::7\r\nForwarded: for=\"[2001:db9::7]\";proto=https\r\n"},
		{name: "trusted, X-Real-IP and Forwarded forged by its client", peer: "10.0.0.1",
			in: sent{xff: []string{"203.0.113.9"}, realIP: []string{"127.0.0.1"}, fwd: []string{"for=127.0.0.1", "for=203.0.113.9"}},
			want: "X-Forwarded-For: 203.0.113.9, 10.0.0.1\r\nX-Forwarded-Host: a.test\r\nX-Forwarded-Proto: http\r\n" +
				"X-Real-Ip: 203.0.113.9\r\nForwarded: for=203.0.113.9;proto=http\r\n"},
		{name: "another node's proxy", peer: "203.0.113.5", hop: true,
			in: sent{xff: []string{"198.51.100.1"}, proto: []string{"https"}, realIP: []string{"198.51.100.1"}, fwd: []string{"for=198.51.100.1;proto=https"}},
			want: "X-Forwarded-For: 198.51.100.1, 203.0.113.5\r\nX-Forwarded-Host: a.test\r\nX-Forwarded-Proto: https\r\n" +
				"X-Real-Ip: 198.51.100.1\r\nForwarded: for=198.51.100.1;proto=https\r\n"},
	} {
		fw := newForwarded(c.peer, c.tls, trust)
		if got := string(appendForwarded(nil, &fw, "a.test", &c.in, c.hop)); got != c.want {
			t.Errorf("%s (strings):\n got %q\nwant %q", c.name, got, c.want)
		}
		bs := func(v []string) (b [][]byte) {
			for _, s := range v {
				b = append(b, []byte(s))
			}
			return b
		}
		in := sentFields[[]byte]{xff: bs(c.in.xff), host: bs(c.in.host), proto: bs(c.in.proto), realIP: bs(c.in.realIP), fwd: bs(c.in.fwd)}
		if got := string(appendForwarded(nil, &fw, []byte("a.test"), &in, c.hop)); got != c.want {
			t.Errorf("%s (bytes):\n got %q\nwant %q", c.name, got, c.want)
		}
	}
}

// ParseTrustList takes addresses and CIDRs, comma-separated or not, and
// names what it refuses.
func TestParseTrustList(t *testing.T) {
	l, err := ParseTrustList([]string{"10.0.0.0/8, 192.0.2.1", "::ffff:192.0.2.9", "2001:db8::/32", "10.1.2.3/8"})
	if err != nil {
		t.Fatal(err)
	}
	if got := strings.Join(l.Strings(), " "); got != "10.0.0.0/8 192.0.2.1/32 192.0.2.9/32 2001:db8::/32 10.0.0.0/8" {
		t.Errorf("parsed %q", got)
	}
	// Everyone (0.0.0.0/0, ::/0) is refused: any client could forge its
	// address and scheme.
	for _, bad := range []string{"10.0.0.0/33", "example.org", "10.0.0", "::ffff:10.0.0.0/104", "0.0.0.0/0", "::/0", "10.0.0.0/0"} {
		if _, err := ParseTrustList([]string{bad}); err == nil || !strings.Contains(err.Error(), bad) {
			t.Errorf("%q: err %v", bad, err)
		}
	}
}
