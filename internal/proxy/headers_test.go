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
