package proxy

import (
	"net"
	"net/http"
	"strings"
)

// Headers on the way, the same for both forwarding engines (the fast path
// and net/http's leg): a request reaches its replica, and an answer its
// client, without the fields that belong to one connection only (hopHeaders
// and those the message's Connection field lists); a request carries the
// forwarded fields appendForwarded writes, in place of any the client sent.

// hopHeaders are the fields a proxy removes from every message it passes on:
// those RFC 9110 (section 7.6.1) names (Connection, Proxy-Connection,
// Keep-Alive, TE, Transfer-Encoding, Upgrade), the proxy credentials that
// are meant for the next hop only (section 11.7: Proxy-Authenticate,
// Proxy-Authorization), and Trailer, which the proxy announces again itself
// for the trailers it passes on. Upgrade and Connection: Upgrade are sent
// again by the upgrade leg, which consumes them. Names are as net/http's
// header maps key them.
var hopHeaders = [...]string{
	"Connection", "Proxy-Connection", "Keep-Alive", "Te", "Transfer-Encoding", "Upgrade",
	"Proxy-Authenticate", "Proxy-Authorization", "Trailer",
}

// hopByLen is hopHeaders in lower case by the length of the name, for the
// fast path's parsers: most names are ruled out by their length alone.
var hopByLen = func() (l [20][]string) {
	for _, h := range hopHeaders {
		l[len(h)] = append(l[len(h)], strings.ToLower(h))
	}
	return l
}()

// hopByHop tells whether k, a name keyed as net/http keys it, is in
// hopHeaders.
func hopByHop(k string) bool {
	for _, h := range hopHeaders {
		if k == h {
			return true
		}
	}
	return false
}

// hopByHopName tells whether k, a name as received, is in hopHeaders.
func hopByHopName(k []byte) bool {
	if len(k) >= len(hopByLen) {
		return false
	}
	for _, h := range hopByLen[len(k)] {
		if eqFold(k, h) {
			return true
		}
	}
	return false
}

// passOn tells whether a field k of a message net/http read is passed on:
// not hop-by-hop, and not named by its Connection values conn.
func passOn(k string, conn []string) bool {
	return !hopByHop(k) && !listed(conn, k)
}

// listed tells whether the Connection values conn name k.
func listed(conn []string, k string) bool {
	for _, v := range conn {
		for tok := range strings.SplitSeq(v, ",") {
			if strings.EqualFold(strings.TrimSpace(tok), k) {
				return true
			}
		}
	}
	return false
}

// forwardedHeader tells whether a request field k (as net/http keys it) is
// one appendForwarded writes, so that the client's is not passed on.
func forwardedHeader(k string) bool {
	switch k {
	case "X-Forwarded-For", "X-Forwarded-Host", "X-Forwarded-Proto", "X-Real-Ip", "Forwarded":
		return true
	}
	return false
}

// forwarded is what a request's forwarded fields say of the client
// connection it came on; made once per connection.
type forwarded struct {
	client string // the peer's IP address
	proto  string // http or https
	lines  string // X-Real-IP and Forwarded for them, with CRLFs
}

func newForwarded(client string, tls bool) forwarded {
	proto := "http"
	if tls {
		proto = "https"
	}
	return forwarded{client: client, proto: proto, lines: "X-Real-Ip: " + client + "\r\nForwarded: " + forwardedValue(client, proto) + "\r\n"}
}

// forwardedOf is the forwarded of a request net/http read.
func forwardedOf(r *http.Request) forwarded {
	return newForwarded(clientIP(r), r.TLS != nil)
}

// appendForwarded appends to b, a request head on its way to a replica, the
// forwarded fields, each line with its CRLF. It is the one place they are
// written, for both engines:
//   - X-Forwarded-For: the values the client sent (xff), then the peer,
//     as other proxies do, so that its last entry is the one to trust;
//   - X-Forwarded-Host: the request's Host;
//   - X-Forwarded-Proto: the protocol the client connection speaks;
//   - X-Real-IP and Forwarded (RFC 7239): made from the peer, whatever the
//     client sent in them, except on a request another node's proxy sent
//     whose hop header authenticated: that one keeps its client's, kept
//     (whole lines, without CRLFs).
//
// The client's own X-Forwarded-Host, -Proto, X-Real-IP and Forwarded never
// pass (the callers leave them out, see forwardedHeader).
func appendForwarded[T ~string | ~[]byte](b []byte, fw *forwarded, host T, xff, kept []T) []byte {
	b = append(b, "X-Forwarded-For: "...)
	for _, v := range xff {
		b = append(b, v...)
		b = append(b, ", "...)
	}
	b = append(b, fw.client...)
	b = append(b, "\r\nX-Forwarded-Host: "...)
	b = append(b, host...)
	b = append(b, "\r\nX-Forwarded-Proto: "...)
	b = append(b, fw.proto...)
	b = append(b, "\r\n"...)
	if len(kept) > 0 {
		for _, l := range kept {
			b = append(b, l...)
			b = append(b, "\r\n"...)
		}
		return b
	}
	return append(b, fw.lines...)
}

// forwardedValue is the Forwarded header (RFC 7239) naming the client at
// addr and the protocol; an IPv6 address is quoted in brackets.
func forwardedValue(addr, proto string) string {
	if strings.IndexByte(addr, ':') >= 0 {
		addr = `"[` + addr + `]"`
	}
	return "for=" + addr + ";proto=" + proto
}

// clientIP is the address of the client of a request net/http read.
func clientIP(r *http.Request) string {
	ip, _, err := net.SplitHostPort(r.RemoteAddr)
	if err != nil {
		return r.RemoteAddr
	}
	return ip
}
