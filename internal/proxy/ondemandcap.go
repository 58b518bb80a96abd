package proxy

import (
	"net"
	"net/netip"
)

// One client may hold at most maxOnDemandPerClient handshakes waiting for
// a certificate on demand (its IPv4 address, or its IPv6 /64: one host
// commonly has a whole /64), so that a few addresses cannot fill the
// maxOnDemandWaiting places and hold back everyone's first visits for
// OnDemandWait. A handshake beyond fails at once (a TLS alert), not held,
// and asks for nothing: the client's held ones already asked.
const maxOnDemandPerClient = 8

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

// holdFor counts a held handshake of client; false when the client holds
// maxOnDemandPerClient already.
func (e *edge) holdFor(client string) bool {
	if client == "" {
		return true
	}
	e.heldMu.Lock()
	defer e.heldMu.Unlock()
	if e.held == nil {
		e.held = map[string]int{}
	}
	if e.held[client] >= maxOnDemandPerClient {
		return false
	}
	e.held[client]++
	return true
}

// unhold uncounts a held handshake of client.
func (e *edge) unhold(client string) {
	if client == "" {
		return
	}
	e.heldMu.Lock()
	defer e.heldMu.Unlock()
	if n := e.held[client] - 1; n > 0 {
		e.held[client] = n
	} else {
		delete(e.held, client)
	}
}
