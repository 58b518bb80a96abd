package e2e

import (
	"fmt"
	"net"
	"net/netip"
	"strings"
	"testing"

	"github.com/shoal-run/shoal/internal/api/types"
)

// bridgeApp is busybox's httpd answering "<name> <replica>", n replicas.
func bridgeApp(name string, n int) string {
	return fmt.Sprintf(`name = %q
image = "busybox:1"
command = ["sh", "-c", "mkdir -p /tmp/www && echo %s $SHOAL_REPLICA > /tmp/www/index.html && exec httpd -f -p $PORT -h /tmp/www"]
[scale]
min = %d
max = %d
`, name, name, n, n)
}

// With bridges of 2 ports (--bridge-ports, a /29 of the /24 each), five
// replicas of two apps spread over several bridges: the proxy reaches
// every one, a replica reaches no other app's on another bridge, shoal
// info states the ceiling, and the daemon leaves no bridge behind
// (cleanHost).
func TestReplicasOnSeveralBridges(t *testing.T) {
	d := startDaemon(t, "--bridge-ports", "2", "--netns-pool", "-1")
	if info := d.must("info"); !strings.Contains(info, "32 bridges ("+d.bridge+" … "+d.bridge+"-31) of 2 ports") ||
		!strings.Contains(info, "at most 64 replicas") {
		t.Fatalf("shoal info does not state the bridges' ceiling:\n%s", info)
	}
	d.busybox("busybox:1")
	d.deploy(bridgeApp("a", 3))
	d.deploy(bridgeApp("b", 2))
	subnet := netip.MustParsePrefix(d.subnet)
	bridgeOf := func(r types.Replica) int {
		host, _, err := net.SplitHostPort(r.Addr)
		if err != nil {
			t.Fatalf("replica %s: address %q: %v", r.ID, r.Addr, err)
		}
		ip := netip.MustParseAddr(host)
		if !subnet.Contains(ip) {
			t.Fatalf("replica %s: %s is not in %s", r.ID, ip, subnet)
		}
		return int(ip.As4()[3]) / 8 // the /29 slices of a /24
	}
	ready := map[string][]types.Replica{}
	bridges := map[int]bool{}
	for app, n := range map[string]int{"a": 3, "b": 2} {
		st := d.waitApp(app, fmt.Sprint(n, " ready replicas"), func(a types.App) bool { return a.Ready == n })
		for _, r := range st.Replicas {
			if r.State == "ready" {
				ready[app] = append(ready[app], r)
				bridges[bridgeOf(r)] = true
			}
		}
	}
	if len(bridges) < 3 {
		t.Fatalf("5 replicas on bridges of 2 ports are on %d bridges: %v", len(bridges), ready)
	}
	// The proxy reaches every replica, whatever its bridge.
	proxy := d.proxyAddr()
	for app, rs := range ready {
		want := map[string]bool{}
		for _, r := range rs {
			want[app+" "+r.ID] = true
		}
		for i := 0; len(want) > 0; i++ {
			if i == 300 {
				t.Fatalf("app %s: replicas never answered through the proxy: %v", app, want)
			}
			code, body, _ := get(t, proxy, app, "/")
			if code != 200 {
				t.Fatalf("app %s through the proxy: %d %q", app, code, body)
			}
			delete(want, strings.TrimSpace(body))
		}
	}
	// Apps apart across bridges, either way (a has 3 replicas on bridges
	// of 2 ports: one is on another bridge than any of b's).
	var pairs int
	for _, ra := range ready["a"] {
		for _, rb := range ready["b"] {
			if bridgeOf(ra) == bridgeOf(rb) {
				continue
			}
			pairs++
			d.mustReach("a to itself", ra, ra.Addr, "a "+ra.ID)
			d.mustNotReach("a to b's replica on another bridge", ra, rb.Addr)
			d.mustNotReach("b to a's replica on another bridge", rb, ra.Addr)
		}
	}
	if pairs == 0 {
		t.Fatalf("no replicas of a and b on different bridges: %v", ready)
	}
}
