package proxy

import (
	"net"
	"net/netip"
)

// One client may hold at most maxOnDemandPerClient handshakes waiting for
// a certificate on demand (its IPv4 address, or its IPv6 /64: one host
// commonly has a whole /64), so that a few addresses cannot fill the
// maxOnDemandWaiting places and hold back everyone's first visits for
// OnDemandWait. Wider prefixes are capped too (onDemandCaps), since one
// subscriber commonly has many addresses: an IPv6 /56 or /48 (256 or
// 65,536 /64s), IPv4 addresses in one /24. A handshake beyond any cap
// fails at once (a TLS alert), not held, and asks for nothing: the
// client's held ones already asked.
const maxOnDemandPerClient = 8

// onDemandCap bounds the handshakes held by the addresses of one prefix
// of bits bits.
type onDemandCap struct{ bits, max int }

// onDemandCaps are the caps of an IPv4 client (its address, its /24) and
// of an IPv6 one (its /64, /56, /48), finest first: a handshake is held
// only while every prefix of its client is under its cap.
var onDemandCaps = map[bool][]onDemandCap{
	true:  {{32, maxOnDemandPerClient}, {24, 32}},
	false: {{64, maxOnDemandPerClient}, {56, 32}, {48, 64}},
}

// onDemandClient is what a held handshake counts against: its peer's IPv4
// address, or the /64 of an IPv6 one ("" when unknown: not capped).
func onDemandClient(addr net.Addr) string {
	if addr == nil {
		return ""
	}
	ap, err := netip.ParseAddrPort(addr.String())
	if err != nil {
		return ""
	}
	ip := ap.Addr().Unmap()
	if ip.Is4() {
		return ip.String()
	}
	p, err := ip.WithZone("").Prefix(64)
	if err != nil {
		return ""
	}
	return p.String()
}

// heldScope is one prefix a held handshake counts against, and its cap.
type heldScope struct {
	key string
	max int
}

// onDemandScopes are the prefixes client (onDemandClient's) counts
// against, finest first; nil when it is "" or not understood.
func onDemandScopes(client string) []heldScope {
	var ip netip.Addr
	if p, err := netip.ParsePrefix(client); err == nil {
		ip = p.Addr()
	} else if a, err := netip.ParseAddr(client); err == nil {
		ip = a
	} else {
		return nil
	}
	caps := onDemandCaps[ip.Is4()]
	scopes := make([]heldScope, 0, len(caps))
	for _, c := range caps {
		p, err := ip.Prefix(c.bits)
		if err != nil {
			return nil
		}
		scopes = append(scopes, heldScope{key: p.String(), max: c.max})
	}
	return scopes
}

// holdFor counts a held handshake of client against each of its prefixes;
// false (nothing counted) when one of them holds its most already.
func (e *edge) holdFor(client string) bool {
	scopes := onDemandScopes(client)
	if len(scopes) == 0 {
		return true
	}
	e.heldMu.Lock()
	defer e.heldMu.Unlock()
	if e.held == nil {
		e.held = map[string]int{}
	}
	for _, s := range scopes {
		if e.held[s.key] >= s.max {
			return false
		}
	}
	for _, s := range scopes {
		e.held[s.key]++
	}
	return true
}

// unhold uncounts a held handshake of client.
func (e *edge) unhold(client string) {
	scopes := onDemandScopes(client)
	if len(scopes) == 0 {
		return
	}
	e.heldMu.Lock()
	defer e.heldMu.Unlock()
	for _, s := range scopes {
		if n := e.held[s.key] - 1; n > 0 {
			e.held[s.key] = n
		} else {
			delete(e.held, s.key)
		}
	}
}
