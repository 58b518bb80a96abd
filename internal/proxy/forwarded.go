package proxy

import (
	"net"
	"net/http"
	"strings"
)

// Every request reaches its replica with X-Real-IP and Forwarded made from
// the address of the client connection, whatever the client sent in them
// (they are dropped on the way in); X-Forwarded-For gets the client's
// address appended to what the client sent, as other proxies do, so its
// last entry is the one to trust.

// forwardedLines returns the X-Real-IP and Forwarded header lines, with
// CRLFs, for a client at addr (an IP) over proto (http or https).
func forwardedLines(addr, proto string) string {
	return "X-Real-Ip: " + addr + "\r\nForwarded: " + forwardedValue(addr, proto) + "\r\n"
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
