package network

import (
	"fmt"
	"net"
	"net/netip"
	"os"
	"path/filepath"
	"sort"
	"strings"
)

// singleBridge is the layout of a daemon from before the subnet was cut
// into slices: one bridge holding the whole subnet.
func singleBridge(base string, subnet netip.Prefix) bridgeSet {
	return bridgeSet{subnet: subnet, bits: subnet.Bits(), names: []string{base},
		ports: min(DefaultBridgePorts, 1<<(32-subnet.Bits())-3)}
}

// oldLayout says why the host still runs the single-bridge layout an
// earlier daemon left, "" when it does not: a namespace of that daemon is
// still in StateDir and either the first bridge carries the whole subnet
// or such a namespace holds an address outside the first slice (in
// libcni's cache or host-local's reservations of the first bridge).
// Cutting the subnet then would take the bridge's route to those
// addresses away (the first add re-addresses the bridge to its slice) and
// hand them out again from another bridge's range, whose reservations are
// kept apart. With no such namespace left the slices are safe.
func oldLayout(stateDir string, br bridgeSet, c *cniNet) string {
	if len(br.names) == 1 {
		return ""
	}
	ents, err := os.ReadDir(stateDir)
	if err != nil {
		return ""
	}
	live := map[string]bool{}
	for _, de := range ents {
		if name := de.Name(); strings.HasPrefix(name, string(Bridge)+"-") && nsName().MatchString(name) {
			live[name] = true
		}
	}
	if len(live) == 0 {
		return ""
	}
	whole := netip.PrefixFrom(br.subnet.Addr().Next(), br.subnet.Bits())
	if ifi, err := net.InterfaceByName(br.names[0]); err == nil {
		addrs, _ := ifi.Addrs()
		for _, a := range addrs {
			if p, err := netip.ParsePrefix(a.String()); err == nil && p == whole {
				return fmt.Sprintf("bridge %s has %s", br.names[0], whole)
			}
		}
	}
	first := br.slice(0)
	names := make([]string, 0, len(live))
	for name := range live {
		names = append(names, name)
	}
	sort.Strings(names)
	for _, name := range names {
		i, ip, _, err := c.cached(name, filepath.Join(stateDir, name))
		if a, ok := netip.AddrFromSlice(ip.To4()); err == nil && i == 0 && ok && !first.Contains(a) {
			return fmt.Sprintf("namespace %s has %s, outside %s", name, a, first)
		}
	}
	for a, id := range reserved(c.nets[0].ipam) {
		if live[id] && !first.Contains(a) {
			return fmt.Sprintf("namespace %s has %s, outside %s", id, a, first)
		}
	}
	return ""
}

// reserved maps the addresses reserved in a host-local data dir to the
// container IDs holding them. Each reservation is a file named after the
// address whose first line is the container ID.
func reserved(dir string) map[netip.Addr]string {
	ents, err := os.ReadDir(dir)
	if err != nil {
		return nil
	}
	out := map[netip.Addr]string{}
	for _, de := range ents {
		a, err := netip.ParseAddr(de.Name())
		if err != nil {
			continue
		}
		b, err := os.ReadFile(filepath.Join(dir, de.Name()))
		if err != nil {
			continue
		}
		id, _, _ := strings.Cut(strings.ReplaceAll(string(b), "\r", ""), "\n")
		if id = strings.TrimSpace(id); id != "" {
			out[a] = id
		}
	}
	return out
}
