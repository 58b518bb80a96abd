package appapi

import (
	"net/http"
	"testing"
)

// FuzzSelfCalls sends arbitrary bodies and queries to every call of the
// self API with the caller's own token: the answer is never a server
// error, a refusal is a JSON error with its reason, and a 400 names the
// field.
func FuzzSelfCalls(f *testing.F) {
	calls := []struct{ method, path string }{
		{"GET", "/v1/self"}, {"POST", "/v1/self/replicate"}, {"POST", "/v1/self/halt"},
		{"POST", "/v1/self/die"}, {"POST", "/v1/self/metrics"},
	}
	for _, s := range []struct {
		call  uint8
		query string
		body  string
	}{
		{0, "", ""}, {1, "wait=true", `{"app":"web"}`}, {1, "wait=maybe", ""}, {2, "", `{"replica":"web-2"}`},
		{3, "app=shop", ""}, {4, "", `{"name":"queue","value":1.5}`}, {4, "", `{"name":"Queue","value":1}`},
		{4, "", `{"name":"queue","value":1e400}`}, {4, "", `{"name":"queue","value":1} {}`}, {4, "", `[1,2]`},
	} {
		f.Add(s.call, s.query, []byte(s.body))
	}
	f.Fuzz(func(t *testing.T, call uint8, query string, body []byte) {
		r := newRig(t, Rate{PerSecond: 1000, Burst: 1000})
		c := calls[int(call)%len(calls)]
		path := c.path
		if query != "" {
			path += "?" + query
		}
		if !validTarget(path) {
			return
		}
		st, e, _ := r.do(c.method, path, r.own, string(body))
		if st >= 500 || (st == http.StatusBadRequest && e.Field == "") {
			t.Fatalf("%s %s %q: %d %+v", c.method, path, body, st, e)
		}
	})
}

// validTarget reports whether path can be a request target (httptest
// panics on one that cannot).
func validTarget(path string) bool {
	for _, c := range path {
		if c <= ' ' || c == 0x7f || c == '#' {
			return false
		}
	}
	return true
}
