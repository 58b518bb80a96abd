package network

import (
	"fmt"
	"net/netip"
)

// MaxBridgePorts is how many ports a Linux bridge takes (the kernel's
// BR_MAX_PORTS): past it, adding a veth fails with "exchange full". Every
// replica and bridged container is one port, so it, not the subnet, is
// a host's ceiling.
const MaxBridgePorts = 1024

// Ceiling says what bounds the replicas and bridged containers on this
// host: the bridge's ports, or the subnet's addresses when fewer.
func (m *Manager) Ceiling() string {
	p := netip.MustParsePrefix(m.o.Subnet) // checked by New
	addrs := 1<<(32-p.Bits()) - 3          // network, gateway, broadcast
	if addrs < MaxBridgePorts {
		return fmt.Sprintf("network: bridge %s on %s: at most %d replicas and bridged containers (the subnet's addresses)", m.o.Bridge, m.o.Subnet, addrs)
	}
	return fmt.Sprintf("network: bridge %s on %s: at most %d replicas and bridged containers on this host (a Linux bridge takes %d ports, fewer than the subnet's %d addresses)",
		m.o.Bridge, m.o.Subnet, MaxBridgePorts, MaxBridgePorts, addrs)
}
