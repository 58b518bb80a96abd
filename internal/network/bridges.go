package network

import (
	"fmt"
	"hash/fnv"
	"math/bits"
	"net/netip"
	"strconv"
)

// MaxBridgePorts is how many ports a Linux bridge takes (the kernel's
// BR_MAX_PORTS): past it, adding a veth fails with "exchange full".
const MaxBridgePorts = 1024

// DefaultBridgePorts is how many attachments a bridge takes by default:
// the addresses of a /22 slice less its network, gateway and broadcast
// addresses, within MaxBridgePorts.
const DefaultBridgePorts = MaxBridgePorts - 3

// maxBridges bounds the bridges of one host (a /8 would make 16384).
const maxBridges = 256

// bridgeSet is the host's bridges: the subnet cut into slices of equal
// size, one bridge each, the first named after Options.Bridge and holding
// the subnet's first address as its gateway (the self API's address).
// A namespace goes to the first bridge with a port free; traffic between
// bridges is routed by the host, where the policy table decides it as
// between ports of one bridge.
type bridgeSet struct {
	subnet netip.Prefix
	bits   int      // of each slice's prefix
	names  []string // slice i's bridge
	ports  int      // attachments a bridge takes
}

// newBridgeSet cuts subnet into slices that hold ports attachments each
// (at most DefaultBridgePorts; 0 means that). A subnet smaller than one
// slice is one bridge that takes as many as its addresses allow.
func newBridgeSet(base string, subnet netip.Prefix, ports int) bridgeSet {
	if ports <= 0 || ports > DefaultBridgePorts {
		ports = DefaultBridgePorts
	}
	// The smallest slice with ports addresses besides network, gateway
	// and broadcast; larger ones when that would make too many.
	b := max(32-bits.Len(uint(ports+2)), subnet.Bits())
	b = min(b, subnet.Bits()+bits.Len(maxBridges)-1)
	s := bridgeSet{subnet: subnet, bits: b, ports: min(ports, 1<<(32-b)-3)}
	n := 1 << (b - subnet.Bits())
	for i := range n {
		s.names = append(s.names, bridgeNameOf(base, i))
	}
	return s
}

// bridgeNameOf names bridge i of base: base itself for the first, then
// base-1, base-2 … (shortened, with a hash of base, to fit 15 bytes).
func bridgeNameOf(base string, i int) string {
	if i == 0 {
		return base
	}
	suffix := "-" + strconv.Itoa(i)
	if len(base)+len(suffix) <= 15 {
		return base + suffix
	}
	h := fnv.New32a()
	h.Write([]byte(base))
	tag := fmt.Sprintf("%04x", h.Sum32()&0xffff)
	return base[:15-len(suffix)-len(tag)] + tag + suffix
}

// slice is bridge i's part of the subnet.
func (s bridgeSet) slice(i int) netip.Prefix {
	a := s.subnet.Addr().As4()
	v := uint32(a[0])<<24 | uint32(a[1])<<16 | uint32(a[2])<<8 | uint32(a[3])
	v += uint32(i) << (32 - s.bits)
	return netip.PrefixFrom(netip.AddrFrom4([4]byte{byte(v >> 24), byte(v >> 16), byte(v >> 8), byte(v)}), s.bits)
}

// index is the bridge named name, -1 if none of the set.
func (s bridgeSet) index(name string) int {
	for i, n := range s.names {
		if n == name {
			return i
		}
	}
	return -1
}

// Ceiling says what bounds the replicas and bridged containers on this
// host: the bridges' ports, the subnet's addresses cut into slices.
func (m *Manager) Ceiling() string {
	s := m.br
	total := len(s.names) * s.ports
	if m.old != "" {
		return fmt.Sprintf("network: bridge %s on %s, the single-bridge layout of an earlier daemon (%s), kept until the daemon restarts with no replica left: at most %d replicas and bridged containers on this host (a Linux bridge takes %d ports)",
			s.names[0], s.subnet, m.old, total, MaxBridgePorts)
	}
	if len(s.names) == 1 {
		return fmt.Sprintf("network: bridge %s on %s: at most %d replicas and bridged containers on this host (the subnet's addresses; a Linux bridge takes %d ports)",
			s.names[0], s.subnet, total, MaxBridgePorts)
	}
	names := s.names[0] + " … " + s.names[len(s.names)-1]
	return fmt.Sprintf("network: %d bridges (%s) of %d ports on %s, one /%d each, made as needed: at most %d replicas and bridged containers on this host (the subnet's size; a Linux bridge takes %d ports)",
		len(s.names), names, s.ports, s.subnet, s.bits, total, MaxBridgePorts)
}
