package network

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"net"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/shoal-run/shoal/internal/errdefs"
)

// testEnv is a Manager on a bridge and subnet of its own, so that tests
// of other packages running at the same time are not disturbed.
type testEnv struct {
	opts Options
	m    *Manager
}

func requireRoot(t testing.TB) {
	t.Helper()
	if os.Geteuid() != 0 {
		t.Fatal("network tests need root: they create network namespaces and run the CNI plugins")
	}
}

// testOptions returns Options with fresh directories, a random bridge name
// and a random /24 in 10.78.0.0/16 that no route uses.
func testOptions(t testing.TB, poolSize int) Options {
	t.Helper()
	requireRoot(t)
	dir := t.TempDir()
	var b [3]byte
	rand.Read(b[:])
	o := Options{
		StateDir:   filepath.Join(dir, "netns"),
		CNIConfDir: filepath.Join(dir, "cni"),
		Bridge:     "shoalt" + hex.EncodeToString(b[:2]),
		Subnet:     fmt.Sprintf("10.78.%d.0/24", b[2]),
		PoolSize:   poolSize,
	}
	// The state dir may stay bound onto itself when a Manager adopted it
	// (see TestRestore); unbind it before the temp dir is removed. A test
	// that ends with namespaces still attached (or that failed) leaves
	// their nat rules and the bridge, which go too.
	t.Cleanup(func() {
		if ok, _ := isMountPoint(o.StateDir); ok {
			unix.Unmount(o.StateDir, unix.MNT_DETACH)
		}
		removeNetwork(t, o)
	})
	return o
}

// removeNetwork deletes the masquerade rules of every attachment of the
// bundled networks on o's bridges, the bridges and the policy table. It
// goes through every bridge the subnet could be cut into (the smallest
// bridges make the most), whatever BridgePorts the test set after
// testOptions: a bridge left behind keeps its routes, which a later
// test's subnet may overlap.
func removeNetwork(t testing.TB, o Options) {
	t.Helper()
	ctx := context.Background()
	br := newBridgeSet(o.Bridge, netip.MustParsePrefix(o.Subnet), 1)
	out, err := exec.CommandContext(ctx, "iptables-save", "-t", "nat").Output()
	if err != nil {
		t.Errorf("iptables-save: %v", err)
	}
	for _, bridge := range br.names {
		network := "shoal-" + bridge
		id := regexp.MustCompile(`name: \\"` + regexp.QuoteMeta(network) + `\\" id: \\"([^\\"]+)\\"`)
		seen := map[string]bool{}
		for _, m := range id.FindAllStringSubmatch(string(out), -1) {
			if seen[m[1]] {
				continue
			}
			seen[m[1]] = true
			if err := teardownMasq(ctx, network, m[1]); err != nil {
				t.Errorf("cleanup: %v", err)
			}
		}
		if err := deleteLink(bridge); err != nil {
			t.Errorf("cleanup: %v", err)
		}
	}
	// The policy table of a Manager that was not closed idle.
	if tb, err := newNFTTable(o.Bridge, nil, netip.Prefix{}, 0); err != nil {
		t.Errorf("cleanup: %v", err)
	} else {
		if err := tb.remove(); err != nil {
			t.Errorf("cleanup: %v", err)
		}
		tb.close()
	}
}

// newManager starts a Manager on o and closes it at the end of the test,
// checking that nothing is left of the pool.
func newManager(t testing.TB, o Options) *Manager {
	t.Helper()
	m, err := New(context.Background(), o)
	if err != nil {
		t.Fatalf("network.New: %v", err)
	}
	t.Cleanup(func() {
		if err := m.Close(context.Background()); err != nil {
			t.Errorf("Close: %v", err)
		}
	})
	return m
}

// waitReady waits until the pool holds n namespaces of every mode.
func waitReady(t testing.TB, m *Manager, n int) {
	t.Helper()
	deadline := time.Now().Add(60 * time.Second)
	for {
		s := m.Stats()
		if s.Ready[None] >= n && s.Ready[Bridge] >= n {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("pool not filled to %d per mode: %+v", n, s)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// nsLinks returns the interfaces of the namespace at path with their IPv4
// addresses.
func nsLinks(t testing.TB, path string) map[string][]netip.Prefix {
	t.Helper()
	out := map[string][]netip.Prefix{}
	err := withNetNS(path, func() error {
		ifs, err := net.Interfaces()
		if err != nil {
			return err
		}
		for _, ifi := range ifs {
			out[ifi.Name] = nil
			if ifi.Flags&net.FlagUp == 0 {
				return fmt.Errorf("%s is down", ifi.Name)
			}
			addrs, err := ifi.Addrs()
			if err != nil {
				return err
			}
			for _, a := range addrs {
				if p, err := netip.ParsePrefix(a.String()); err == nil && p.Addr().Is4() {
					out[ifi.Name] = append(out[ifi.Name], p)
				}
			}
		}
		return nil
	})
	if err != nil {
		t.Fatalf("interfaces of %s: %v", path, err)
	}
	return out
}

// listenIn opens a TCP echo server inside the namespace at path.
func listenIn(t testing.TB, path, addr string) net.Listener {
	t.Helper()
	var ln net.Listener
	err := withNetNS(path, func() (err error) {
		ln, err = net.Listen("tcp4", addr)
		return err
	})
	if err != nil {
		t.Fatalf("listen in %s: %v", path, err)
	}
	t.Cleanup(func() { ln.Close() })
	go echo(ln)
	return ln
}

func echo(ln net.Listener) {
	for {
		c, err := ln.Accept()
		if err != nil {
			return
		}
		go func() {
			defer c.Close()
			io.Copy(c, c)
		}()
	}
}

// dialIn connects from inside the namespace at path ("" for the host).
func dialIn(path, addr string) (net.Conn, error) {
	d := net.Dialer{Timeout: 5 * time.Second}
	if path == "" {
		return d.Dial("tcp4", addr)
	}
	var c net.Conn
	err := withNetNS(path, func() (err error) {
		c, err = d.Dial("tcp4", addr)
		return err
	})
	return c, err
}

// roundTrip sends a line over c and checks the echo.
func roundTrip(t testing.TB, c net.Conn) {
	t.Helper()
	defer c.Close()
	c.SetDeadline(time.Now().Add(5 * time.Second))
	msg := []byte("shoal\n")
	if _, err := c.Write(msg); err != nil {
		t.Fatalf("write: %v", err)
	}
	got := make([]byte, len(msg))
	if _, err := io.ReadFull(c, got); err != nil || string(got) != string(msg) {
		t.Fatalf("echo: got %q, %v", got, err)
	}
}

// assertNoVeths checks that no interface is left on the bridge.
func assertNoVeths(t testing.TB, o Options) {
	t.Helper()
	if ports, err := os.ReadDir("/sys/class/net/" + o.Bridge + "/brif"); err == nil && len(ports) > 0 {
		t.Errorf("veths left on %s: %v", o.Bridge, ports)
	}
}

// assertGone checks that nothing of the namespace at path is left: no
// file, no mount, no address reservation, no masquerade rule and no
// libcni cache entry.
func assertGone(t testing.TB, o Options, path string) {
	t.Helper()
	name := filepath.Base(path)
	if _, err := os.Stat(path); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("netns file %s still there (%v)", path, err)
	}
	if ok, err := isMountPoint(path); err != nil || ok {
		t.Errorf("netns %s still mounted (%v)", path, err)
	}
	ipam := filepath.Join(o.CNIConfDir, "ipam", "shoal-"+o.Bridge)
	ents, _ := os.ReadDir(ipam)
	for _, e := range ents {
		b, _ := os.ReadFile(filepath.Join(ipam, e.Name()))
		if strings.Contains(string(b), name) {
			t.Errorf("address %s still reserved for %s", e.Name(), name)
		}
	}
	if out, err := exec.Command("iptables-save", "-t", "nat").CombinedOutput(); err != nil {
		t.Errorf("iptables-save: %v: %s", err, out)
	} else if strings.Contains(string(out), name) {
		t.Errorf("nat rules of %s left:\n%s", name, out)
	}
	cache, _ := os.ReadDir(filepath.Join(o.CNIConfDir, "cache", "results"))
	for _, e := range cache {
		if strings.Contains(e.Name(), name) {
			t.Errorf("libcni cache entry %s left", e.Name())
		}
	}
}

func mustInvalid(t *testing.T, err error, field string) {
	t.Helper()
	if !errdefs.IsInvalid(err) || errdefs.Field(err) != field {
		t.Fatalf("got %v, want an invalid %q error", err, field)
	}
}
