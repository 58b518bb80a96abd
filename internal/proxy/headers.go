package proxy

import (
	"crypto/tls"
	"fmt"
	"net"
	"net/http"
	"net/netip"
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

// TrustList is the peers whose forwarded fields are believed (see
// appendForwarded): addresses and CIDRs, as nginx's set_real_ip_from and
// Caddy's trusted_proxies.
type TrustList []netip.Prefix

// ParseTrustList reads addresses and CIDRs (such as 10.0.0.0/8 or
// 2001:db8::1), each entry of list one or a comma-separated list of them.
func ParseTrustList(list []string) (TrustList, error) {
	var l TrustList
	for _, e := range list {
		for v := range strings.SplitSeq(e, ",") {
			v = strings.TrimSpace(v)
			if v == "" {
				continue
			}
			if strings.IndexByte(v, '/') >= 0 {
				p, err := netip.ParsePrefix(v)
				if err != nil {
					return nil, fmt.Errorf("%q is not an address or CIDR: %w", v, err)
				}
				if p.Addr().Is4In6() {
					return nil, fmt.Errorf("%q: write an IPv4 CIDR as such", v)
				}
				if p.Bits() == 0 {
					// Every client could then forge its address and scheme.
					return nil, fmt.Errorf("%q trusts every client's forwarded fields: name the proxies in front (their addresses or CIDRs)", v)
				}
				l = append(l, p.Masked())
				continue
			}
			a, err := netip.ParseAddr(v)
			if err != nil {
				return nil, fmt.Errorf("%q is not an address or CIDR: %w", v, err)
			}
			a = a.Unmap().WithZone("")
			l = append(l, netip.PrefixFrom(a, a.BitLen()))
		}
	}
	return l, nil
}

// Strings is l as ParseTrustList reads it back.
func (l TrustList) Strings() []string {
	s := make([]string, len(l))
	for i, p := range l {
		s[i] = p.String()
	}
	return s
}

// has tells whether a, unmapped, is in l.
func (l TrustList) has(a netip.Addr) bool {
	a = a.Unmap().WithZone("")
	for _, p := range l {
		if p.Contains(a) {
			return true
		}
	}
	return false
}

// forwarded is what a request's forwarded fields say of the client
// connection it came on; made once per connection.
type forwarded struct {
	client  string // the peer's IP address
	proto   string // http or https
	lines   string // X-Real-IP and Forwarded for them, with CRLFs
	trusted bool   // the peer is in trust, its forwarded fields believed
	trust   TrustList
}

func newForwarded(client string, tls bool, trust TrustList) forwarded {
	proto := "http"
	if tls {
		proto = "https"
	}
	fw := forwarded{client: client, proto: proto, trust: trust,
		lines: "X-Real-Ip: " + client + "\r\nForwarded: " + forwardedValue(client, proto) + "\r\n"}
	if a, err := netip.ParseAddr(client); err == nil {
		fw.trusted = trust.has(a)
	}
	return fw
}

// forwardedOf is the forwarded of a request net/http read.
func forwardedOf(r *http.Request, trust TrustList) forwarded {
	return newForwarded(clientIP(r), requestTLS(r), trust)
}

// requestTLS reports whether r came over TLS: net/http's own, or a TLS
// connection the fast path handed to it.
func requestTLS(r *http.Request) bool {
	if r.TLS != nil {
		return true
	}
	if h, ok := r.Context().Value(connKey{}).(*handedConn); ok {
		// A *tls.Conn, or one that agreed on h2 (alpnConn).
		_, isTLS := h.Conn.(interface{ ConnectionState() tls.ConnectionState })
		return isTLS
	}
	return false
}

// requestSNI is the server name the TLS handshake of r's connection asked
// for ("" when none or not TLS).
func requestSNI(r *http.Request) string {
	if r.TLS != nil {
		return r.TLS.ServerName
	}
	if h, ok := r.Context().Value(connKey{}).(*handedConn); ok {
		if cs, ok := h.Conn.(interface{ ConnectionState() tls.ConnectionState }); ok {
			return cs.ConnectionState().ServerName
		}
	}
	return ""
}

// sentFields are the values of a request's own forwarded fields, as
// received (net/http's or the fast path's parser's): appendForwarded keeps
// them when they come from a trusted peer.
type sentFields[T ~string | ~[]byte] struct {
	xff, host, proto, realIP, fwd []T // X-Forwarded-For, -Host, -Proto, X-Real-IP, Forwarded
}

// appendForwarded appends to b, a request head on its way to a replica, the
// forwarded fields, each line with its CRLF. It is the one place they are
// written, for both engines. From a peer that is not trusted they say what
// the proxy saw, whatever the client sent in them (in):
//   - X-Forwarded-For: the peer;
//   - X-Forwarded-Host: the request's Host;
//   - X-Forwarded-Proto: the protocol the client connection speaks;
//   - X-Real-IP and Forwarded (RFC 7239): the peer and that protocol.
//
// From a trusted peer (in fw.trust, as a TLS terminator in front of the
// proxy; or another node's proxy, hop, whose hop header authenticated) the
// fields it sent are kept: X-Forwarded-For extended with the peer, as other
// proxies do, so that its last entry is the one to trust, and
// X-Forwarded-Host and -Proto passed on as sent (made as above when not
// sent). X-Real-IP and Forwarded name the client X-Forwarded-For gives: its
// last entry that is not a trusted proxy (nginx's real_ip_recursive), with
// the protocol X-Forwarded-Proto gives; only another node's proxy has its
// own passed on, since a terminator may pass on a client's forged ones.
//
// The callers pass on none of these fields themselves (see forwardedHeader).
func appendForwarded[T ~string | ~[]byte](b []byte, fw *forwarded, host T, in *sentFields[T], hop bool) []byte {
	trusted := hop || fw.trusted
	b = append(b, "X-Forwarded-For: "...)
	if trusted {
		for _, v := range in.xff {
			b = append(b, v...)
			b = append(b, ", "...)
		}
	}
	b = append(b, fw.client...)
	b = append(b, "\r\n"...)
	if !trusted {
		b = append(b, "X-Forwarded-Host: "...)
		b = append(b, host...)
		b = append(b, "\r\nX-Forwarded-Proto: "...)
		b = append(b, fw.proto...)
		b = append(b, "\r\n"...)
		return append(b, fw.lines...)
	}
	b = appendSent(b, "X-Forwarded-Host: ", in.host, host)
	var pb [16]byte
	proto := append(pb[:0], fw.proto...)
	if len(in.proto) > 0 {
		if p := firstElem(pb[:0], in.proto[0]); len(p) > 0 {
			proto = p
		}
	}
	b = appendSent(b, "X-Forwarded-Proto: ", in.proto, proto)
	// X-Real-IP and Forwarded are passed on only from another node's
	// proxy, which made them itself. A TLS terminator passes on whatever
	// its client sent in fields it does not set itself, so from it they
	// are made from X-Forwarded-For, whose entries it did extend.
	var client netip.Addr
	if !hop || len(in.realIP) == 0 || len(in.fwd) == 0 {
		client = realClient(fw, in.xff)
	}
	if hop && len(in.realIP) > 0 {
		b = appendLines(b, "X-Real-Ip: ", in.realIP)
	} else {
		b = append(b, "X-Real-Ip: "...)
		b = appendAddr(b, client, fw.client, false)
		b = append(b, "\r\n"...)
	}
	if hop && len(in.fwd) > 0 {
		return appendLines(b, "Forwarded: ", in.fwd)
	}
	b = append(b, "Forwarded: for="...)
	b = appendAddr(b, client, fw.client, true)
	b = append(b, ";proto="...)
	b = append(b, proto...)
	return append(b, "\r\n"...)
}

// appendSent appends the lines name+v for each value sent, or name+made
// when none was.
func appendSent[T ~string | ~[]byte, U ~string | ~[]byte](b []byte, name string, sent []T, made U) []byte {
	if len(sent) > 0 {
		return appendLines(b, name, sent)
	}
	b = append(b, name...)
	b = append(b, made...)
	return append(b, "\r\n"...)
}

// appendLines appends a line name+v for each of vs.
func appendLines[T ~string | ~[]byte](b []byte, name string, vs []T) []byte {
	for _, v := range vs {
		b = append(b, name...)
		b = append(b, v...)
		b = append(b, "\r\n"...)
	}
	return b
}

// appendAddr appends a, or peer when a is not valid; quoted in brackets
// for a Forwarded field when it is IPv6.
func appendAddr(b []byte, a netip.Addr, peer string, quote bool) []byte {
	v6 := a.Is6() || !a.IsValid() && strings.IndexByte(peer, ':') >= 0
	if quote && v6 {
		b = append(b, `"[`...)
	}
	if a.IsValid() {
		b = a.AppendTo(b)
	} else {
		b = append(b, peer...)
	}
	if quote && v6 {
		b = append(b, `]"`...)
	}
	return b
}

// firstElem appends to b the first element of the list v, trimmed.
func firstElem[T ~string | ~[]byte](b []byte, v T) []byte {
	i := 0
	for i < len(v) && v[i] != ',' {
		i++
	}
	for j := 0; j < i; j++ {
		if c := v[j]; c != ' ' && c != '\t' {
			b = append(b, c)
		}
	}
	return b
}

// realClient is the client X-Forwarded-For values xff name, for a trusted
// peer: walking from their last entry back, the first that is not a
// trusted proxy, or the first entry when all are. An entry that is not an
// address ends the walk at the trusted proxy after it. It returns the zero
// Addr for the peer itself.
func realClient[T ~string | ~[]byte](fw *forwarded, xff []T) netip.Addr {
	var client netip.Addr
	for i := len(xff) - 1; i >= 0; i-- {
		v := xff[i]
		end := len(v)
		for j := end - 1; j >= -1; j-- {
			if j >= 0 && v[j] != ',' {
				continue
			}
			e := strings.TrimSpace(string(v[j+1 : end]))
			end = j
			if e == "" {
				continue
			}
			a, err := netip.ParseAddr(e)
			if err != nil {
				return client
			}
			client = a.Unmap().WithZone("")
			if !fw.trust.has(client) {
				return client
			}
		}
	}
	return client
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
