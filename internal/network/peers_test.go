package network

import (
	"context"
	"crypto/rand"
	"fmt"
	"net"
	"net/netip"
	"os/exec"
	"strconv"
	"strings"
	"testing"

	"github.com/shoal-run/shoal/internal/errdefs"
)

// peerLink makes a namespace outside the host, as another node, on a
// random /30 of 10.second.0.0/16: its name and address, and the host's
// side of the link, the node's address.
func peerLink(t *testing.T, second byte) (ns, peer string, node netip.Addr) {
	t.Helper()
	var b [2]byte
	rand.Read(b[:])
	base := netip.AddrFrom4([4]byte{10, second, b[0], b[1] &^ 3})
	ns, peer = outside(t, base)
	return ns, peer, base.Next()
}

// TestPolicyPeerPorts: a stateful replica's peer ports. Its replica
// reaches them at a private address (another node's) and no other port
// there; published on an address of the host (the node's), a connection
// from beyond the host, and one from the host, to that address and port
// reaches the replica; a second replica may not publish the same port
// there; the rules go with the replica, and the table at the end.
func TestPolicyPeerPorts(t *testing.T) {
	ctx := context.Background()
	o := testOptions(t, -1)
	m := newManager(t, o)
	must := func(err error) {
		t.Helper()
		if err != nil {
			t.Fatal(err)
		}
	}
	peerNS, peer, node := peerLink(t, 78)
	lnPeer := listenIn(t, peerNS, peer+":0")
	lnOther := listenIn(t, peerNS, peer+":0")
	peerPort := uint16(lnPeer.Addr().(*net.TCPAddr).Port)

	a, err := m.Acquire(ctx, "db-0", Bridge)
	must(err)
	b1, err := m.Acquire(ctx, "db-1", Bridge)
	must(err)
	c, err := m.Acquire(ctx, "other-0", Bridge)
	must(err)
	lnB := listenIn(t, b1.NSPath, "0.0.0.0:0")
	bPort := uint16(lnB.Addr().(*net.TCPAddr).Port)
	published := net.JoinHostPort(node.String(), strconv.Itoa(int(bPort)))

	must(m.SetPolicy(a, Policy{App: "db"}))
	wantReach(t, "a private address, no peer ports", a.NSPath, lnPeer.Addr().String(), false)
	must(m.SetPolicy(a, Policy{App: "db", PeerPorts: []uint16{peerPort}}))
	wantReach(t, "a peer port at a private address", a.NSPath, lnPeer.Addr().String(), true)
	wantReach(t, "another port at that address", a.NSPath, lnOther.Addr().String(), false)

	wantReach(t, "an unpublished port of the node's address", peerNS, published, false)
	must(m.SetPolicy(b1, Policy{App: "db", PeerPorts: []uint16{bPort}, Publish: node}))
	wantReach(t, "a published peer port, from beyond the host", peerNS, published, true)
	wantReach(t, "a published peer port, from the host", "", published, true)
	elem := node.String() + " . " + strconv.Itoa(int(bPort)) + " : " + b1.IP.String()
	if l := nftList(t, o.Bridge); !strings.Contains(l, elem) {
		t.Fatalf("no element %s:\n%s", elem, l)
	}
	err = m.SetPolicy(c, Policy{App: "other", PeerPorts: []uint16{bPort}, Publish: node})
	if !errdefs.IsConflict(err) || !strings.Contains(err.Error(), strconv.Itoa(int(bPort))) {
		t.Fatalf("a second replica publishing port %d on %s: %v, want a conflict naming the port", bPort, node, err)
	}
	if err := m.SetPolicy(c, Policy{App: "other", PeerPorts: []uint16{1}, Publish: netip.MustParseAddr("::1")}); err == nil {
		t.Fatal("peer ports published on an IPv6 address")
	}

	// A restarted Manager keeps them.
	must(m.Close(ctx))
	m = newManager(t, o)
	must(m.Restore(ctx, map[string]string{"db-0": a.NSPath, "db-1": b1.NSPath, "other-0": c.NSPath}))
	wantReach(t, "a published peer port after a restart", peerNS, published, true)
	wantReach(t, "a peer port after a restart", a.NSPath, lnPeer.Addr().String(), true)

	b1, _ = m.Lookup("db-1")
	must(m.Release(ctx, b1))
	if l := nftList(t, o.Bridge); strings.Contains(l, elem) || strings.Contains(l, " : "+b1.IP.String()) {
		t.Fatalf("the published port outlived its replica:\n%s", l)
	}
	wantReach(t, "the node's address once the replica is gone", peerNS, published, false)
	for _, id := range []string{"db-0", "other-0"} {
		at, _ := m.Lookup(id)
		must(m.Release(ctx, at))
	}
	must(m.Close(ctx))
	if l := nftList(t, o.Bridge); l != "" {
		t.Fatalf("the policy table outlived the bridge:\n%s", l)
	}
}

// TestPolicyRefusedKeepsOld: a policy refused because its peer port is
// published for another replica leaves the attachment the policy it had:
// its egress stays none and its own published port stays.
func TestPolicyRefusedKeepsOld(t *testing.T) {
	ctx := context.Background()
	o := testOptions(t, -1)
	m := newManager(t, o)
	must := func(err error) {
		t.Helper()
		if err != nil {
			t.Fatal(err)
		}
	}
	peerNS, _, node := peerLink(t, 79)

	a, err := m.Acquire(ctx, "db-0", Bridge)
	must(err)
	c, err := m.Acquire(ctx, "other-0", Bridge)
	must(err)
	lnC := listenIn(t, c.NSPath, "0.0.0.0:0")
	cPort := uint16(lnC.Addr().(*net.TCPAddr).Port)
	aPort := cPort + 1
	if cPort == 65535 {
		aPort = cPort - 1
	}
	must(m.SetPolicy(a, Policy{App: "db", PeerPorts: []uint16{aPort}, Publish: node}))
	must(m.SetPolicy(c, Policy{App: "other", Egress: EgressNone, PeerPorts: []uint16{cPort}, Publish: node}))
	published := net.JoinHostPort(node.String(), strconv.Itoa(int(cPort)))
	wantReach(t, "a published peer port", peerNS, published, true)
	before := nftList(t, o.Bridge)

	err = m.SetPolicy(c, Policy{App: "other", Egress: EgressNone, PeerPorts: []uint16{aPort}, Publish: node})
	if !errdefs.IsConflict(err) {
		t.Fatalf("publishing port %d of another replica: %v, want a conflict", aPort, err)
	}
	after := nftList(t, o.Bridge)
	if after != before {
		t.Fatalf("a refused policy changed the table:\nbefore:\n%s\nafter:\n%s", before, after)
	}
	if !strings.Contains(nftSet(t, after, setEgressNone), c.IP.String()) {
		t.Fatalf("%s left the egress_none set:\n%s", c.IP, after)
	}
	wantReach(t, "the old published peer port after a refused policy", peerNS, published, true)

	// The policy stays after a restart too (its file).
	must(m.Close(ctx))
	m = newManager(t, o)
	must(m.Restore(ctx, map[string]string{"db-0": a.NSPath, "other-0": c.NSPath}))
	if l := nftList(t, o.Bridge); !strings.Contains(nftSet(t, l, setEgressNone), c.IP.String()) {
		t.Fatalf("%s not in the egress_none set after a restart:\n%s", c.IP, l)
	}
	for _, id := range []string{"db-0", "other-0"} {
		at, _ := m.Lookup(id)
		must(m.Release(ctx, at))
	}
}

// nftSet is the part of listing l that declares set name.
func nftSet(t *testing.T, l, name string) string {
	t.Helper()
	i := strings.Index(l, "set "+name+" {")
	if i < 0 {
		t.Fatalf("no set %s:\n%s", name, l)
	}
	j := strings.Index(l[i:], "}")
	return l[i : i+j]
}

// TestPolicyPeerPortsNotLinkLocal: a replica with egress none reaches its
// peer ports at a private address (a node's) but not at a link-local one
// (a cloud metadata service's).
func TestPolicyPeerPortsNotLinkLocal(t *testing.T) {
	ctx := context.Background()
	o := testOptions(t, -1)
	m := newManager(t, o)
	var b [3]byte
	rand.Read(b[:])
	privNS, priv := outside(t, netip.AddrFrom4([4]byte{10, 80, b[0], b[1] &^ 3}))
	llNS, ll := outside(t, netip.AddrFrom4([4]byte{169, 254, 100 + b[2]%100, b[1] &^ 3}))
	lnPriv := listenIn(t, privNS, priv+":0")
	lnLL := listenIn(t, llNS, ll+":0")
	port := func(ln net.Listener) uint16 { return uint16(ln.Addr().(*net.TCPAddr).Port) }

	a, err := m.Acquire(ctx, "db-0", Bridge)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { m.Release(ctx, a) })
	if err := m.SetPolicy(a, Policy{App: "db", Egress: EgressNone, PeerPorts: []uint16{port(lnPriv), port(lnLL)}}); err != nil {
		t.Fatal(err)
	}
	wantReach(t, "a peer port at a private address", a.NSPath, lnPriv.Addr().String(), true)
	wantReach(t, "a peer port at a link-local address", a.NSPath, lnLL.Addr().String(), false)
	wantReach(t, "the link-local address from the host", "", lnLL.Addr().String(), true)
}

// TestPolicyForeignDNAT: from beyond the host a connection DNATed into the
// bridges gets through only to a replica's peer port (as peer_dnat
// translates it), not one some other table DNATed to another port.
func TestPolicyForeignDNAT(t *testing.T) {
	ctx := context.Background()
	o := testOptions(t, -1)
	m := newManager(t, o)
	peerNS, _, node := peerLink(t, 81)

	a, err := m.Acquire(ctx, "db-0", Bridge)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { m.Release(ctx, a) })
	lnPeer := listenIn(t, a.NSPath, "0.0.0.0:0")
	lnOther := listenIn(t, a.NSPath, "0.0.0.0:0")
	port := func(ln net.Listener) string { return strconv.Itoa(ln.Addr().(*net.TCPAddr).Port) }
	if err := m.SetPolicy(a, Policy{App: "db", PeerPorts: []uint16{uint16(lnPeer.Addr().(*net.TCPAddr).Port)}, Publish: node}); err != nil {
		t.Fatal(err)
	}
	// Another table DNATs the node's address, the other port, to the replica.
	table := fmt.Sprintf("shoaltest%x", node.AsSlice()[2:]) // as random as the link
	script := "table ip " + table + " {\n chain pre { type nat hook prerouting priority dstnat; policy accept;\n" +
		"  ip daddr " + node.String() + " tcp dport " + port(lnOther) + " dnat to " + a.IP.String() + "\n }\n}\n"
	cmd := exec.Command("nft", "-f", "-")
	cmd.Stdin = strings.NewReader(script)
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("nft -f: %v: %s", err, out)
	}
	t.Cleanup(func() { exec.Command("nft", "delete", "table", "ip", table).Run() })

	wantReach(t, "a published peer port", peerNS, net.JoinHostPort(node.String(), port(lnPeer)), true)
	wantReach(t, "another port DNATed by another table", peerNS, net.JoinHostPort(node.String(), port(lnOther)), false)
}
