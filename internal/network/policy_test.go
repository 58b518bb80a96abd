package network

import (
	"context"
	"crypto/rand"
	"fmt"
	"net"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/shoal-run/shoal/internal/clock"
)

// outside makes a network namespace of the test's own joined to the host
// by a veth pair on the /30 prefix (.1 the host, .2 the namespace, whose
// default route is the host), standing in for an address beyond the host.
// It returns the namespace's path and address.
func outside(t *testing.T, base netip.Addr) (string, string) {
	t.Helper()
	var b [2]byte
	rand.Read(b[:])
	host := fmt.Sprintf("shoalo%x", b[:])
	path := filepath.Join(t.TempDir(), "outside")
	if err := createNetNS(path, true); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		deleteLink(host)
		destroyNetNS(path)
	})
	hostIP, nsIP := base.Next(), base.Next().Next()
	for _, args := range [][]string{
		{"link", "add", host, "type", "veth", "peer", "name", "eth0", "netns", path},
		{"addr", "add", hostIP.String() + "/30", "dev", host},
		{"link", "set", host, "up"},
		{"--net=" + path, "ip", "addr", "add", nsIP.String() + "/30", "dev", "eth0"},
		{"--net=" + path, "ip", "link", "set", "eth0", "up"},
		{"--net=" + path, "ip", "route", "add", "default", "via", hostIP.String()},
	} {
		cmd := exec.Command("ip", args...)
		if strings.HasPrefix(args[0], "--net=") {
			cmd = exec.Command("nsenter", args...)
		}
		if out, err := cmd.CombinedOutput(); err != nil {
			t.Fatalf("ip %s: %v: %s", strings.Join(args, " "), err, out)
		}
	}
	return path, nsIP.String()
}

// reaches reports whether a connection from the namespace at from to addr
// is answered.
func reaches(t *testing.T, from, addr string) bool {
	t.Helper()
	c, err := dialIn(from, addr)
	if err != nil {
		return false
	}
	roundTrip(t, c)
	return true
}

func wantReach(t *testing.T, what, from, addr string, want bool) {
	t.Helper()
	if got := reaches(t, from, addr); got != want {
		t.Fatalf("%s (%s): reached %v, want %v", what, addr, got, want)
	}
}

// nftList is nft's listing of the policy table of bridge ("" when there
// is none).
func nftList(t *testing.T, bridge string) string {
	t.Helper()
	out, err := exec.Command("nft", "list", "table", "inet", bridge).CombinedOutput()
	if err != nil {
		if strings.Contains(string(out), "No such file") {
			return ""
		}
		t.Fatalf("nft list table inet %s: %v: %s", bridge, err, out)
	}
	return string(out)
}

func TestPolicy(t *testing.T) {
	ctx := context.Background()
	o := testOptions(t, -1)
	m := newManager(t, o)
	if l := nftList(t, o.Bridge); !strings.Contains(l, "chain forward") || !strings.Contains(l, "set pairs") {
		t.Fatalf("the policy table of %s:\n%s", o.Bridge, l)
	}
	att := map[string]*Attachment{}
	for _, id := range []string{"web", "db", "other"} {
		a, err := m.Acquire(ctx, id, Bridge)
		if err != nil {
			t.Fatal(err)
		}
		att[id] = a
	}
	allIsolated(t, o.Bridge, 3)
	port := func(ln net.Listener) string { _, p, _ := net.SplitHostPort(ln.Addr().String()); return p }
	at := func(id string, ln net.Listener) string { return net.JoinHostPort(att[id].IP.String(), port(ln)) }
	lnDB := listenIn(t, att["db"].NSPath, "0.0.0.0:0")
	lnWeb := listenIn(t, att["web"].NSPath, "0.0.0.0:0")

	// By default nothing on the bridge reaches another attachment, and
	// the host is still reached at its side.
	wantReach(t, "web to db, no policy", att["web"].NSPath, at("db", lnDB), false)
	wantReach(t, "the host to db", "", at("db", lnDB), true)

	// A host service on every address is not reached through the
	// gateway, until its port is allowed.
	hostLn, err := net.Listen("tcp4", "0.0.0.0:0")
	if err != nil {
		t.Fatal(err)
	}
	defer hostLn.Close()
	go echo(hostLn)
	gw := net.JoinHostPort(m.Gateway().String(), port(hostLn))
	wantReach(t, "a host service through the gateway", att["web"].NSPath, gw, false)
	if err := m.AllowHostPort(hostLn.Addr().(*net.TCPAddr).Port); err != nil {
		t.Fatal(err)
	}
	wantReach(t, "an allowed host port", att["web"].NSPath, gw, true)

	// Public egress by default; private ranges never.
	var b [2]byte
	rand.Read(b[:])
	pubNS, pub := outside(t, netip.AddrFrom4([4]byte{198, 18, b[0], b[1] &^ 3}))
	privNS, priv := outside(t, netip.AddrFrom4([4]byte{10, 79, b[0], b[1] &^ 3}))
	lnPub := listenIn(t, pubNS, pub+":0")
	lnPriv := listenIn(t, privNS, priv+":0")
	wantReach(t, "public egress", att["web"].NSPath, lnPub.Addr().String(), true)
	wantReach(t, "a private address", att["web"].NSPath, lnPriv.Addr().String(), false)
	wantReach(t, "the host to the private address", "", lnPriv.Addr().String(), true)

	// web allows db: web reaches db's replicas, not the other way round,
	// and other reaches neither.
	must := func(err error) {
		t.Helper()
		if err != nil {
			t.Fatal(err)
		}
	}
	must(m.SetPolicy(att["web"], Policy{App: "web", Allow: []string{"db"}}))
	must(m.SetPolicy(att["db"], Policy{App: "db", Egress: EgressNone}))
	must(m.SetPolicy(att["other"], Policy{App: "other"}))
	wantReach(t, "web to db, allowed", att["web"].NSPath, at("db", lnDB), true)
	wantReach(t, "db to web", att["db"].NSPath, at("web", lnWeb), false)
	wantReach(t, "other to db", att["other"].NSPath, at("db", lnDB), false)
	wantReach(t, "db without egress", att["db"].NSPath, lnPub.Addr().String(), false)
	wantReach(t, "other's public egress", att["other"].NSPath, lnPub.Addr().String(), true)
	wantReach(t, "db to an allowed host port", att["db"].NSPath, gw, true)

	// A replica of db that comes later is reached too; the rules of one
	// that goes go with it.
	db2, err := m.Acquire(ctx, "db2", Bridge)
	must(err)
	must(m.SetPolicy(db2, Policy{App: "db"}))
	lnDB2 := listenIn(t, db2.NSPath, "0.0.0.0:0")
	wantReach(t, "web to a new db replica", att["web"].NSPath, net.JoinHostPort(db2.IP.String(), port(lnDB2)), true)
	pair := att["web"].IP.String() + " . " + db2.IP.String()
	if l := nftList(t, o.Bridge); !strings.Contains(l, pair) {
		t.Fatalf("no element %s:\n%s", pair, l)
	}
	must(m.Release(ctx, db2))
	if l := nftList(t, o.Bridge); strings.Contains(l, pair) {
		t.Fatalf("the element %s outlived its namespace:\n%s", pair, l)
	}

	// A restarted Manager keeps the policies of the namespaces it finds.
	must(m.Close(ctx))
	m = newManager(t, o)
	must(m.Restore(ctx, map[string]string{"web": att["web"].NSPath, "db": att["db"].NSPath, "other": att["other"].NSPath}))
	wantReach(t, "web to db after a restart", att["web"].NSPath, at("db", lnDB), true)
	wantReach(t, "db without egress after a restart", att["db"].NSPath, lnPub.Addr().String(), false)
	wantReach(t, "other to db after a restart", att["other"].NSPath, at("db", lnDB), false)

	for _, id := range []string{"web", "db", "other"} {
		a, _ := m.Lookup(id)
		must(m.Release(ctx, a))
	}
	must(m.Close(ctx))
	if l := nftList(t, o.Bridge); l != "" {
		t.Fatalf("the policy table outlived the bridge:\n%s", l)
	}
}

// allIsolated checks that the bridge has n ports, each isolated.
func allIsolated(t *testing.T, bridge string, n int) {
	t.Helper()
	ports, err := os.ReadDir("/sys/class/net/" + bridge + "/brif")
	if err != nil || len(ports) != n {
		t.Fatalf("ports of %s: %v, %v; want %d", bridge, ports, err, n)
	}
	for _, p := range ports {
		b, err := os.ReadFile("/sys/class/net/" + p.Name() + "/brport/isolated")
		if err != nil || strings.TrimSpace(string(b)) != "1" {
			t.Fatalf("bridge port %s is not isolated: %q %v", p.Name(), b, err)
		}
	}
}

// The guard rebuilds a table deleted or emptied from outside at its next
// check, on the Manager's clock.
func TestPolicyGuard(t *testing.T) {
	ctx := context.Background()
	o := testOptions(t, -1)
	fc := clock.NewFake(time.Now())
	o.Clock, o.PolicyCheck = fc, time.Minute
	m := newManager(t, o)
	var atts []*Attachment
	for i, app := range []string{"web", "db"} {
		a, err := m.Acquire(ctx, fmt.Sprint("g", i), Bridge)
		if err != nil {
			t.Fatal(err)
		}
		if err := m.SetPolicy(a, Policy{App: app, Egress: EgressNone}); err != nil {
			t.Fatal(err)
		}
		atts = append(atts, a)
	}
	t.Cleanup(func() {
		for _, a := range atts {
			m.Release(ctx, a)
		}
	})
	ln := listenIn(t, atts[1].NSPath, "0.0.0.0:0")
	_, p, _ := net.SplitHostPort(ln.Addr().String())
	dbAddr := net.JoinHostPort(atts[1].IP.String(), p)
	wantReach(t, "web to db", atts[0].NSPath, dbAddr, false)

	for i, outside := range [][]string{
		{"delete", "table", "inet", o.Bridge},
		{"flush", "table", "inet", o.Bridge},
		{"flush", "set", "inet", o.Bridge, "egress_none"},
	} {
		if out, err := exec.Command("nft", outside...).CombinedOutput(); err != nil {
			t.Fatalf("nft %v: %v: %s", outside, err, out)
		}
		if outside[0] != "flush" || outside[1] != "set" {
			wantReach(t, "web to db, the table "+outside[0]+"d", atts[0].NSPath, dbAddr, true)
		}
		// Not before the check is due.
		waitTimer(t, fc)
		fc.Advance(o.PolicyCheck - time.Second)
		time.Sleep(50 * time.Millisecond)
		if n := m.Stats().PolicyRebuilds; n != uint64(i) {
			t.Fatalf("after nft %v: %d rebuilds before the check was due, want %d", outside, n, i)
		}
		fc.Advance(time.Second)
		deadline := time.Now().Add(30 * time.Second)
		for m.Stats().PolicyRebuilds != uint64(i+1) {
			if time.Now().After(deadline) {
				t.Fatalf("after nft %v: the guard did not rebuild the table", outside)
			}
			time.Sleep(5 * time.Millisecond)
		}
		wantReach(t, "web to db, the table rebuilt", atts[0].NSPath, dbAddr, false)
		if l := nftList(t, o.Bridge); !strings.Contains(l, atts[0].IP.String()) {
			t.Fatalf("the rebuilt table lacks the egress_none element:\n%s", l)
		}
	}
}

// waitTimer waits until the guard waits on fc.
func waitTimer(t *testing.T, fc *clock.Fake) {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for fc.Timers() == 0 {
		if time.Now().After(deadline) {
			t.Fatal("the guard set no timer")
		}
		time.Sleep(time.Millisecond)
	}
}
