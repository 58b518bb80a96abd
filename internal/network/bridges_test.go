package network

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/netip"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/shoal-run/shoal/internal/errdefs"
)

// shoal info states the host's ceiling: the subnet cut into bridges of at
// most 1021 ports (a Linux bridge takes 1024), not one bridge's 1024.
func TestCeiling(t *testing.T) {
	for _, c := range []struct {
		subnet string
		ports  int
		want   string
	}{
		{"10.77.0.0/16", 0, "64 bridges (shoal0 … shoal0-63) of 1021 ports on 10.77.0.0/16, one /22 each, made as needed: at most 65344 replicas"},
		{"10.77.0.0/24", 0, "bridge shoal0 on 10.77.0.0/24: at most 253 replicas and bridged containers on this host"},
		{"10.77.0.0/22", 0, "bridge shoal0 on 10.77.0.0/22: at most 1021 replicas"},
		{"10.77.0.0/21", 0, "2 bridges (shoal0 … shoal0-1) of 1021 ports on 10.77.0.0/21, one /22 each, made as needed: at most 2042 replicas"},
		{"10.77.0.0/24", 4, "32 bridges (shoal0 … shoal0-31) of 4 ports on 10.77.0.0/24, one /29 each, made as needed: at most 128 replicas"},
		{"10.0.0.0/8", 0, "256 bridges (shoal0 … shoal0-255) of 1021 ports on 10.0.0.0/8, one /16 each, made as needed: at most 261376 replicas"},
	} {
		m := &Manager{br: newBridgeSet("shoal0", netip.MustParsePrefix(c.subnet), c.ports)}
		if got := m.Ceiling(); !strings.Contains(got, c.want) {
			t.Errorf("%s, %d ports: %q, want it to say %q", c.subnet, c.ports, got, c.want)
		}
	}
}

// Each bridge has a slice of the subnet of its own and a name that fits
// an interface's 15 bytes, the first the one the daemon was given.
func TestBridgeSet(t *testing.T) {
	s := newBridgeSet("shoal0", netip.MustParsePrefix("10.77.0.0/16"), 0)
	if len(s.names) != 64 || s.names[0] != "shoal0" || s.names[63] != "shoal0-63" {
		t.Fatalf("names %v", s.names)
	}
	for i, want := range map[int]string{0: "10.77.0.0/22", 1: "10.77.4.0/22", 63: "10.77.252.0/22"} {
		if got := s.slice(i).String(); got != want {
			t.Errorf("slice %d: %s, want %s", i, got, want)
		}
	}
	long := newBridgeSet("abcdefghijklmno", netip.MustParsePrefix("10.77.0.0/16"), 4)
	seen := map[string]bool{}
	for _, n := range long.names {
		if len(n) > 15 || seen[n] || !bridgeName().MatchString(n) {
			t.Fatalf("bridge name %q: too long, seen or not an interface name", n)
		}
		seen[n] = true
	}
	if long.names[0] != "abcdefghijklmno" || long.index(long.names[7]) != 7 || long.index("x") != -1 {
		t.Errorf("names %v", long.names[:8])
	}
}

// Past a bridge's ports namespaces go to the next bridge, each on its
// bridge's slice; the host reaches all of them, the policy holds between
// bridges as on one (with the source address kept), a full set of
// bridges refuses the next namespace, a freed port is used again, and
// Close removes every bridge and the table.
func TestBridgesSpread(t *testing.T) {
	ctx := context.Background()
	o := testOptions(t, -1)
	o.Subnet = strings.Replace(o.Subnet, ".0/24", ".0/28", 1)
	o.BridgePorts = 2 // two bridges of a /29 each
	m := newManager(t, o)
	br := m.br
	if len(br.names) != 2 || br.bits != 29 || br.ports != 2 {
		t.Fatalf("bridge set %+v", br)
	}
	var att []*Attachment
	for i := range 4 {
		a, err := m.Acquire(ctx, fmt.Sprint("c", i), Bridge)
		if err != nil {
			t.Fatal(err)
		}
		att = append(att, a)
		slice := br.slice(i / 2)
		ip, _ := netip.AddrFromSlice(a.IP.To4())
		if !slice.Contains(ip) || a.Gateway.String() != slice.Addr().Next().String() {
			t.Fatalf("attachment %d: %s via %s, want one in %s", i, a.IP, a.Gateway, slice)
		}
	}
	allIsolated(t, br.names[0], 2)
	allIsolated(t, br.names[1], 2)
	if _, err := m.Acquire(ctx, "c4", Bridge); !errors.Is(err, errdefs.ErrUnavailable) || !strings.Contains(err.Error(), "every bridge is full") {
		t.Fatalf("a fifth namespace on 2 bridges of 2 ports: %v", err)
	}

	port := func(ln net.Listener) string { _, p, _ := net.SplitHostPort(ln.Addr().String()); return p }
	var lns []net.Listener
	seen := make(chan string, 16)
	for _, a := range att {
		var ln net.Listener
		if err := withNetNS(a.NSPath, func() (err error) { ln, err = net.Listen("tcp4", "0.0.0.0:0"); return err }); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { ln.Close() })
		go func() {
			for {
				c, err := ln.Accept()
				if err != nil {
					return
				}
				seen <- c.RemoteAddr().(*net.TCPAddr).IP.String()
				go func() { defer c.Close(); io.Copy(c, c) }()
			}
		}()
		lns = append(lns, ln)
	}
	at := func(i int) string { return net.JoinHostPort(att[i].IP.String(), port(lns[i])) }
	for i := range att {
		wantReach(t, fmt.Sprint("the host to attachment ", i), "", at(i), true)
		<-seen
	}
	// Tenants apart: on one bridge and across the two.
	for _, c := range [][2]int{{0, 1}, {0, 2}, {2, 0}, {3, 1}} {
		wantReach(t, fmt.Sprintf("%d to %d, no policy", c[0], c[1]), att[c[0]].NSPath, at(c[1]), false)
	}
	// An allowed app on the other bridge, that direction only, seeing
	// the caller's own address.
	if err := m.SetPolicy(att[0], Policy{App: "web", Allow: []string{"db"}}); err != nil {
		t.Fatal(err)
	}
	if err := m.SetPolicy(att[3], Policy{App: "db"}); err != nil {
		t.Fatal(err)
	}
	wantReach(t, "web to db across bridges", att[0].NSPath, at(3), true)
	if got := <-seen; got != att[0].IP.String() {
		t.Errorf("db saw web's connection from %s, want %s", got, att[0].IP)
	}
	wantReach(t, "db to web across bridges", att[3].NSPath, at(0), false)
	wantReach(t, "web to another app across bridges", att[0].NSPath, at(2), false)

	// Every bridge reaches the host's allowed ports at the first gateway.
	hostLn, err := net.Listen("tcp4", "0.0.0.0:0")
	if err != nil {
		t.Fatal(err)
	}
	defer hostLn.Close()
	go echo(hostLn)
	if err := m.AllowHostPort(hostLn.Addr().(*net.TCPAddr).Port); err != nil {
		t.Fatal(err)
	}
	gw := net.JoinHostPort(m.Gateway().String(), port(hostLn))
	wantReach(t, "the host port from the second bridge", att[2].NSPath, gw, true)

	// A freed port is taken again.
	if err := m.Release(ctx, att[1]); err != nil {
		t.Fatal(err)
	}
	a, err := m.Acquire(ctx, "c4", Bridge)
	if err != nil {
		t.Fatal(err)
	}
	if ip, _ := netip.AddrFromSlice(a.IP.To4()); !br.slice(0).Contains(ip) {
		t.Fatalf("after a release on the first bridge: %s, want one in %s", a.IP, br.slice(0))
	}
	att[1] = a

	for _, a := range att {
		if err := m.Release(ctx, a); err != nil {
			t.Fatal(err)
		}
	}
	if err := m.Close(ctx); err != nil {
		t.Fatal(err)
	}
	for _, b := range br.names {
		if _, err := net.InterfaceByName(b); err == nil {
			t.Errorf("bridge %s left after Close", b)
		}
	}
	if l := nftList(t, o.Bridge); l != "" {
		t.Errorf("table left after Close:\n%s", l)
	}
}

// A restarted daemon adopts namespaces on every bridge, counts their
// ports, and frees what a vanished one held on its own bridge.
func TestRestoreAcrossBridges(t *testing.T) {
	ctx := context.Background()
	o := testOptions(t, -1)
	o.Subnet = strings.Replace(o.Subnet, ".0/24", ".0/28", 1)
	o.BridgePorts = 1 // four bridges of a /30 each
	m1, err := New(ctx, o)
	if err != nil {
		t.Fatal(err)
	}
	var att []*Attachment
	for i := range 3 {
		a, err := m1.Acquire(ctx, fmt.Sprint("c", i), Bridge)
		if err != nil {
			t.Fatal(err)
		}
		att = append(att, a)
	}
	if err := destroyNetNS(att[2].NSPath); err != nil { // gone without a DEL
		t.Fatal(err)
	}
	crash(m1)

	m2 := newManager(t, o)
	br := m2.br
	if err := m2.Restore(ctx, map[string]string{"c0": att[0].NSPath, "c1": att[1].NSPath}); err != nil {
		t.Fatalf("Restore: %v", err)
	}
	for i := range 2 {
		got, ok := m2.Lookup(fmt.Sprint("c", i))
		if !ok {
			t.Fatalf("c%d not adopted", i)
		}
		if ip, _ := netip.AddrFromSlice(got.IP.To4()); !br.slice(i).Contains(ip) {
			t.Fatalf("c%d adopted at %s, want an address of %s", i, got.IP, br.slice(i))
		}
	}
	ipam := filepath.Join(o.CNIConfDir, "ipam", "shoal-"+br.names[2])
	if ents, _ := os.ReadDir(ipam); countAddrs(ents) > 0 {
		t.Errorf("the vanished namespace's address on %s is still reserved: %v", br.names[2], ents)
	}
	// The adopted hold their bridges' ports: the next goes to the third.
	a, err := m2.Acquire(ctx, "c3", Bridge)
	if err != nil {
		t.Fatal(err)
	}
	if ip, _ := netip.AddrFromSlice(a.IP.To4()); !br.slice(2).Contains(ip) {
		t.Fatalf("after adoption: %s, want an address of %s", a.IP, br.slice(2))
	}
	for _, a := range []*Attachment{att[0], att[1], a} {
		if err := m2.Release(ctx, a); err != nil {
			t.Fatal(err)
		}
	}
	if err := m2.Close(ctx); err != nil {
		t.Fatal(err)
	}
	for _, b := range br.names {
		if _, err := net.InterfaceByName(b); err == nil {
			t.Errorf("bridge %s left after Close", b)
		}
	}
}
