package network

import (
	"context"
	"errors"
	"net"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"

	"github.com/shoal-run/shoal/internal/errdefs"
)

func TestParseMode(t *testing.T) {
	for _, tc := range []struct {
		in   string
		want Mode
		ok   bool
	}{
		{"none", None, true},
		{"bridge", Bridge, true},
		{" Bridge ", Bridge, true},
		{"", "", false},
		{"host", "", false},
		{"bridged", "", false},
	} {
		t.Run(tc.in, func(t *testing.T) {
			got, err := ParseMode(tc.in)
			if !tc.ok {
				mustInvalid(t, err, "network")
				return
			}
			if err != nil || got != tc.want {
				t.Fatalf("ParseMode(%q) = %q, %v; want %q", tc.in, got, err, tc.want)
			}
		})
	}
}

func TestNewRejectsBadOptions(t *testing.T) {
	requireRoot(t)
	ctx := context.Background()
	good := func() Options {
		d := t.TempDir()
		return Options{StateDir: filepath.Join(d, "ns"), CNIConfDir: filepath.Join(d, "cni"), Bridge: "shoaltbad", Subnet: "10.78.250.0/24"}
	}
	for _, tc := range []struct {
		name, field string
		edit        func(*Options)
	}{
		{"relative state dir", "state dir", func(o *Options) { o.StateDir = "netns" }},
		{"no conf dir", "cni conf dir", func(o *Options) { o.CNIConfDir = "" }},
		{"subnet not a prefix", "subnet", func(o *Options) { o.Subnet = "10.77.0.0" }},
		{"subnet host bits", "subnet", func(o *Options) { o.Subnet = "10.77.0.1/16" }},
		{"subnet ipv6", "subnet", func(o *Options) { o.Subnet = "fd00::/64" }},
		{"subnet too small", "subnet", func(o *Options) { o.Subnet = "10.77.0.0/31" }},
		{"bridge name too long", "bridge", func(o *Options) { o.Bridge = "abcdefghijklmnop" }},
		{"bridge name slash", "bridge", func(o *Options) { o.Bridge = "a/b" }},
	} {
		t.Run(tc.name, func(t *testing.T) {
			o := good()
			tc.edit(&o)
			m, err := New(ctx, o)
			if err == nil {
				m.Close(ctx)
			}
			mustInvalid(t, err, tc.field)
			if o.StateDir != "" && filepath.IsAbs(o.StateDir) {
				if _, err := os.Stat(o.StateDir); !errors.Is(err, os.ErrNotExist) {
					t.Errorf("state dir made although the options are bad (%v)", err)
				}
			}
		})
	}
}

func TestNewNamesMissingPlugin(t *testing.T) {
	o := testOptions(t, -1)
	o.CNIBinDirs = []string{t.TempDir()}
	m, err := New(context.Background(), o)
	if err == nil {
		m.Close(context.Background())
		t.Fatal("New succeeded without plugins")
	}
	for _, want := range []string{`"bridge"`, "containernetworking-plugins"} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("error %q does not name %s", err, want)
		}
	}
}

func TestNoneNamespace(t *testing.T) {
	ctx := context.Background()
	o := testOptions(t, -1)
	m := newManager(t, o)

	a, err := m.Acquire(ctx, "c1", None)
	if err != nil {
		t.Fatal(err)
	}
	if a.Mode != None || a.IP != nil || a.Interface != "" || filepath.Dir(a.NSPath) != o.StateDir {
		t.Fatalf("attachment %+v", a)
	}
	links := nsLinks(t, a.NSPath)
	if len(links) != 1 || links["lo"] == nil {
		t.Fatalf("interfaces %v, want only lo (up, with 127.0.0.1)", links)
	}

	// The host's loopback is not the namespace's.
	host, err := net.Listen("tcp4", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer host.Close()
	go echo(host)
	if c, err := dialIn(a.NSPath, host.Addr().String()); err == nil {
		c.Close()
		t.Fatal("a none namespace reached the host's loopback")
	}
	// Its own loopback works.
	ln := listenIn(t, a.NSPath, "127.0.0.1:0")
	c, err := dialIn(a.NSPath, ln.Addr().String())
	if err != nil {
		t.Fatalf("loopback inside the namespace: %v", err)
	}
	roundTrip(t, c)
	ln.Close()

	if err := m.Release(ctx, a); err != nil {
		t.Fatal(err)
	}
	assertGone(t, o, a.NSPath)
	if err := m.Release(ctx, a); err != nil {
		t.Fatalf("second release: %v", err)
	}
}

func TestBridgeNamespaces(t *testing.T) {
	ctx := context.Background()
	o := testOptions(t, -1)
	m := newManager(t, o)
	subnet := netip.MustParsePrefix(o.Subnet)

	var atts []*Attachment
	for _, id := range []string{"ca", "cb"} {
		a, err := m.Acquire(ctx, id, Bridge)
		if err != nil {
			t.Fatal(err)
		}
		atts = append(atts, a)
		ip, _ := netip.AddrFromSlice(a.IP.To4())
		gw, _ := netip.AddrFromSlice(a.Gateway.To4())
		if !subnet.Contains(ip) || gw != subnet.Addr().Next() || a.Interface != "eth0" {
			t.Fatalf("attachment %+v: want an address in %s, gateway .1, eth0", a, subnet)
		}
		links := nsLinks(t, a.NSPath)
		if len(links) != 2 || links["lo"] == nil || len(links["eth0"]) != 1 || links["eth0"][0].Addr() != ip {
			t.Fatalf("interfaces %v, want lo and eth0 with %s", links, ip)
		}
	}
	if out, err := exec.Command("iptables-save", "-t", "nat").CombinedOutput(); err != nil || !strings.Contains(string(out), atts[0].ID) {
		t.Fatalf("no masquerade rule for %s (%v):\n%s", atts[0].ID, err, out)
	}
	if atts[0].IP.Equal(atts[1].IP) {
		t.Fatalf("both namespaces got %s", atts[0].IP)
	}

	// Namespace to namespace only where a policy allows it, and host to
	// namespace.
	ln := listenIn(t, atts[1].NSPath, net.JoinHostPort(atts[1].IP.String(), "0"))
	if c, err := dialIn(atts[0].NSPath, ln.Addr().String()); err == nil {
		c.Close()
		t.Fatal("namespace a reached b without a policy")
	}
	if err := m.SetPolicy(atts[0], Policy{App: "a", Allow: []string{"b"}}); err != nil {
		t.Fatal(err)
	}
	if err := m.SetPolicy(atts[1], Policy{App: "b"}); err != nil {
		t.Fatal(err)
	}
	c, err := dialIn(atts[0].NSPath, ln.Addr().String())
	if err != nil {
		t.Fatalf("namespace a to b: %v", err)
	}
	roundTrip(t, c)
	ln2 := listenIn(t, atts[0].NSPath, net.JoinHostPort(atts[0].IP.String(), "0"))
	if c, err = dialIn("", ln2.Addr().String()); err != nil {
		t.Fatalf("host to namespace a: %v", err)
	}
	roundTrip(t, c)
	ln.Close()
	ln2.Close()

	if got := m.Stats().InUse; got != 2 {
		t.Fatalf("in use %d, want 2", got)
	}
	for _, a := range atts {
		if err := m.Release(ctx, a); err != nil {
			t.Fatal(err)
		}
		assertGone(t, o, a.NSPath)
	}
	assertNoVeths(t, o)
	if err := m.Close(ctx); err != nil {
		t.Fatal(err)
	}
	if _, err := net.InterfaceByName(o.Bridge); err == nil {
		t.Errorf("bridge %s left after Close", o.Bridge)
	}
	if ok, _ := isMountPoint(o.StateDir); ok {
		t.Errorf("state dir still bound after Close")
	}
}

func TestPoolServesAndDrains(t *testing.T) {
	ctx := context.Background()
	o := testOptions(t, 2)
	m := newManager(t, o)
	waitReady(t, m, 2)

	var atts []*Attachment
	for i, mode := range []Mode{None, Bridge} {
		a, err := m.Acquire(ctx, "pool"+string(mode), mode)
		if err != nil {
			t.Fatal(err)
		}
		if s := m.Stats(); s.Hits != uint64(i+1) || s.Misses != 0 {
			t.Fatalf("stats %+v: want %d hits, no miss", s, i+1)
		}
		want := 1
		if mode == Bridge {
			want = 2
		}
		if links := nsLinks(t, a.NSPath); len(links) != want {
			t.Fatalf("%s namespace from the pool has %v", mode, links)
		}
		atts = append(atts, a)
	}
	if _, err := m.Acquire(ctx, "poolnone", None); !errdefs.IsConflict(err) {
		t.Fatalf("second Acquire for one container: %v, want a conflict", err)
	}
	waitReady(t, m, 2) // refilled in the background
	m.mu.Lock()
	pooled := m.pool[None][0].path
	m.mu.Unlock()
	if err := m.Release(ctx, &Attachment{NSPath: pooled}); !errdefs.IsConflict(err) {
		t.Fatalf("release of a pooled namespace: %v, want a conflict", err)
	}
	if err := m.Release(ctx, &Attachment{NSPath: "/etc/passwd"}); !errdefs.IsInvalid(err) {
		t.Fatalf("release outside the state dir: %v, want invalid", err)
	}
	for _, a := range atts {
		if err := m.Release(ctx, a); err != nil {
			t.Fatal(err)
		}
	}

	if err := m.Close(ctx); err != nil {
		t.Fatal(err)
	}
	if _, err := m.Acquire(ctx, "late", None); !errors.Is(err, errdefs.ErrUnavailable) {
		t.Fatalf("Acquire after Close: %v", err)
	}
	if left, _ := os.ReadDir(o.StateDir); len(left) > 0 {
		t.Fatalf("namespaces left after Close: %v", left)
	}
	for _, a := range atts {
		assertGone(t, o, a.NSPath)
	}
	assertNoVeths(t, o)
	if res, _ := os.ReadDir(filepath.Join(o.CNIConfDir, "ipam", "shoal-"+o.Bridge)); countAddrs(res) > 0 {
		t.Fatalf("address reservations left after Close: %v", res)
	}
	if _, err := net.InterfaceByName(o.Bridge); err == nil {
		t.Errorf("bridge %s left after Close", o.Bridge)
	}
}

func countAddrs(ents []os.DirEntry) int {
	n := 0
	for _, e := range ents {
		if _, err := netip.ParseAddr(e.Name()); err == nil {
			n++
		}
	}
	return n
}

func TestConcurrentAcquireRelease(t *testing.T) {
	ctx := context.Background()
	o := testOptions(t, 1)
	m := newManager(t, o)
	var wg sync.WaitGroup
	errs := make(chan error, 16)
	seen := sync.Map{}
	for i := range 8 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			mode := modes[i%2]
			a, err := m.Acquire(ctx, "cc"+string(rune('a'+i)), mode)
			if err != nil {
				errs <- err
				return
			}
			if a.IP != nil {
				if _, dup := seen.LoadOrStore(a.IP.String(), true); dup {
					errs <- errors.New("address handed out twice: " + a.IP.String())
				}
			}
			if a.IP != nil {
				seen.Delete(a.IP.String())
			}
			errs <- m.Release(ctx, a)
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		if err != nil {
			t.Error(err)
		}
	}
	if s := m.Stats(); s.InUse != 0 || s.Hits+s.Misses != 8 {
		t.Fatalf("stats %+v", s)
	}
}
