package proxy

import (
	"github.com/shoal-run/shoal/internal/route"
)

// Sticky sessions: a route with Sticky set answers a request sent to a
// freshly picked endpoint with a cookie naming it, and a request that
// carries the cookie goes to that endpoint while it is in the route.

// stickyAttrs follow the endpoint ID in the Set-Cookie value.
const stickyAttrs = "; Path=/; HttpOnly"

// setCookieValue returns the Set-Cookie value naming the endpoint id, or ""
// when id cannot be a cookie value (the endpoint is then never sticky).
func setCookieValue(id string) string {
	if id == "" {
		return ""
	}
	for i := 0; i < len(id); i++ {
		if !cookieOctet(id[i]) {
			return ""
		}
	}
	return route.StickyCookie + "=" + id + stickyAttrs
}

// cookieOctet tells whether c may stand unquoted in a cookie value.
func cookieOctet(c byte) bool {
	return c == 0x21 || (c >= 0x23 && c <= 0x2b) || (c >= 0x2d && c <= 0x3a) ||
		(c >= 0x3c && c <= 0x5b) || (c >= 0x5d && c <= 0x7e)
}

// stickyID returns the value of the sticky cookie in one Cookie header
// ("a=1; shoal-replica=web-1f; b=2"), or an empty value.
func stickyID[T string | []byte](h T) T {
	for len(h) > 0 {
		var pair T
		pair, h = h, h[len(h):]
		for i := 0; i < len(pair); i++ {
			if pair[i] == ';' {
				pair, h = pair[:i], pair[i+1:]
				break
			}
		}
		for len(pair) > 0 && (pair[0] == ' ' || pair[0] == '\t') {
			pair = pair[1:]
		}
		n := len(route.StickyCookie)
		if len(pair) > n && pair[n] == '=' && string(pair[:n]) == route.StickyCookie {
			v := pair[n+1:]
			for len(v) > 0 && (v[len(v)-1] == ' ' || v[len(v)-1] == '\t') {
				v = v[:len(v)-1]
			}
			if len(v) >= 2 && v[0] == '"' && v[len(v)-1] == '"' {
				v = v[1 : len(v)-1]
			}
			return v
		}
	}
	return h[:0]
}

// stuck returns the endpoint a sticky cookie names, with the request
// counted on it, or nil when it has left the route.
func (rt *routeSnap) stuck(id string) *endpoint {
	if e := rt.byID[id]; e != nil && e.acquire() {
		return e
	}
	return nil
}

// stuckBytes is stuck for an ID in a request head, without allocating.
func (rt *routeSnap) stuckBytes(id []byte) *endpoint {
	if e := rt.byID[string(id)]; e != nil && e.acquire() {
		return e
	}
	return nil
}
