package network

import (
	"context"
	"fmt"
	"net"
	"net/netip"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

// A host whose earlier daemon put every namespace on one bridge holding
// the whole subnet keeps that layout while one of them is left: the
// bridge keeps the subnet's prefix (so the host still reaches an adopted
// namespace outside the first slice), new namespaces take addresses from
// the same reservations (never one already held) and shoal info says so.
// Restarted with none left, the daemon cuts the subnet into bridges.
// Found by the bridge's prefix or, when a daemon since cut it to the
// first slice, by the addresses held outside that slice.
func TestOldSingleBridgeLayoutKept(t *testing.T) {
	t.Run("bridge on the subnet", func(t *testing.T) { testOldLayoutKept(t, false) })
	t.Run("bridge cut to a slice", func(t *testing.T) { testOldLayoutKept(t, true) })
}

func testOldLayoutKept(t *testing.T, cut bool) {
	ctx := context.Background()
	old := testOptions(t, -1) // a /24 on one bridge: the layout before slices
	old.BridgePorts = 0
	o := old
	o.BridgePorts = 2 // cut, it would be 32 bridges of a /29
	t.Cleanup(func() { removeNetwork(t, o) })
	subnet := netip.MustParsePrefix(o.Subnet)

	m1, err := New(ctx, old)
	if err != nil {
		t.Fatal(err)
	}
	if len(m1.br.names) != 1 || m1.br.bits != subnet.Bits() {
		t.Fatalf("the earlier layout: bridge set %+v, want one bridge on %s", m1.br, subnet)
	}
	// Addresses .2 to .10, spread as host-local spreads them over the
	// whole subnet; the one at .10 stays: outside the first /29, and the
	// first address the second /29's range would hand out.
	var kept *Attachment
	for i := range 9 {
		a, err := m1.Acquire(ctx, fmt.Sprint("old", i), Bridge)
		if err != nil {
			t.Fatal(err)
		}
		kept = a
	}
	want := subnet.Addr().As4()
	want[3] = 10
	if ip, _ := netip.AddrFromSlice(kept.IP.To4()); ip != netip.AddrFrom4(want) {
		t.Fatalf("the kept namespace has %s, want %s", kept.IP, netip.AddrFrom4(want))
	}
	for i := range 8 {
		a, _ := m1.Lookup(fmt.Sprint("old", i))
		if err := m1.Release(ctx, a); err != nil {
			t.Fatal(err)
		}
	}
	crash(m1)
	wholePrefix := netip.PrefixFrom(subnet.Addr().Next(), subnet.Bits())
	if cut {
		slice := netip.PrefixFrom(wholePrefix.Addr(), 29).String()
		for _, args := range [][]string{{"addr", "del", wholePrefix.String(), "dev", o.Bridge}, {"addr", "add", slice, "dev", o.Bridge}} {
			if out, err := exec.Command("ip", args...).CombinedOutput(); err != nil {
				t.Fatalf("ip %v: %v: %s", args, err, out)
			}
		}
	}

	// The new daemon, which would cut the subnet.
	m2 := newManager(t, Options{StateDir: o.StateDir, CNIConfDir: o.CNIConfDir, Bridge: o.Bridge, Subnet: o.Subnet, BridgePorts: 2, PoolSize: -1})
	if err := m2.Restore(ctx, map[string]string{"old8": kept.NSPath}); err != nil {
		t.Fatalf("Restore: %v", err)
	}
	if c := m2.Ceiling(); !strings.Contains(c, "single-bridge layout of an earlier daemon") || !strings.Contains(c, "restarts with no replica left") {
		t.Errorf("ceiling %q, want it to say the earlier layout is kept", c)
	}
	held := reserved(filepath.Join(o.CNIConfDir, "ipam", "shoal-"+o.Bridge))
	if held[netip.AddrFrom4(want)] != filepath.Base(kept.NSPath) {
		t.Fatalf("reservations %v, want %s held by the kept namespace", held, kept.IP)
	}
	var added []*Attachment
	for i := range 4 {
		a, err := m2.Acquire(ctx, fmt.Sprint("new", i), Bridge)
		if err != nil {
			t.Fatal(err)
		}
		added = append(added, a)
		ip, _ := netip.AddrFromSlice(a.IP.To4())
		if id, ok := held[ip]; ok {
			t.Errorf("new namespace %d got %s, held by %s", i, a.IP, id)
		}
		held[ip] = a.ID
	}
	if addrs := bridgeAddrs(t, o.Bridge); len(addrs) != 1 || addrs[0] != wholePrefix {
		t.Errorf("bridge %s has %v after new namespaces, want %s", o.Bridge, addrs, wholePrefix)
	}
	ln := listenIn(t, kept.NSPath, net.JoinHostPort(kept.IP.String(), "0"))
	if c, err := dialIn("", ln.Addr().String()); err != nil {
		t.Errorf("host to the kept namespace at %s: %v", kept.IP, err)
	} else {
		roundTrip(t, c)
	}
	ln.Close()

	// With no namespace left, a restart cuts the subnet.
	for _, a := range append(added, kept) {
		if err := m2.Release(ctx, a); err != nil {
			t.Fatal(err)
		}
	}
	if err := m2.Close(ctx); err != nil {
		t.Fatal(err)
	}
	m3 := newManager(t, o)
	if len(m3.br.names) != 32 || strings.Contains(m3.Ceiling(), "earlier daemon") {
		t.Errorf("restarted with no namespace left: %d bridges, %q; want 32", len(m3.br.names), m3.Ceiling())
	}
}

// bridgeAddrs lists the IPv4 addresses of bridge.
func bridgeAddrs(t *testing.T, bridge string) []netip.Prefix {
	t.Helper()
	ifi, err := net.InterfaceByName(bridge)
	if err != nil {
		t.Fatalf("bridge %s: %v", bridge, err)
	}
	addrs, err := ifi.Addrs()
	if err != nil {
		t.Fatalf("bridge %s: %v", bridge, err)
	}
	var out []netip.Prefix
	for _, a := range addrs {
		if p, err := netip.ParsePrefix(a.String()); err == nil && p.Addr().Is4() {
			out = append(out, p)
		}
	}
	return out
}
