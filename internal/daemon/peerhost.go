package daemon

import (
	"context"
	"net"
	"net/netip"
	"time"
)

// peerHost is the IPv4 address of --advertise's host (a name resolved
// once): where this node publishes its stateful replicas' peer ports. Not
// valid without --advertise or an IPv4 address for it; the reason comes
// back then.
func peerHost(ctx context.Context, advertise string) (netip.Addr, string) {
	if advertise == "" {
		return netip.Addr{}, ""
	}
	host, _, err := net.SplitHostPort(advertise)
	if err != nil {
		return netip.Addr{}, err.Error()
	}
	if a, err := netip.ParseAddr(host); err == nil {
		if !a.Unmap().Is4() {
			return netip.Addr{}, host + " is not an IPv4 address"
		}
		return a.Unmap(), ""
	}
	ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	addrs, err := net.DefaultResolver.LookupNetIP(ctx, "ip4", host)
	if err != nil || len(addrs) == 0 {
		return netip.Addr{}, "no IPv4 address for " + host
	}
	return addrs[0].Unmap(), ""
}
