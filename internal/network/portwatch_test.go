package network

import (
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"log/slog"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"
)

// testBridgePorts makes a bridge of a name of its own with n veth pairs
// on it (their host ends its ports), removed at the end of the test.
func testBridgePorts(t testing.TB, n int) (string, []string) {
	t.Helper()
	requireRoot(t)
	var b [3]byte
	rand.Read(b[:])
	id := hex.EncodeToString(b[:])
	bridge := "shoalh" + id
	var add, del strings.Builder
	fmt.Fprintf(&add, "link add %s type bridge\n", bridge)
	var ports []string
	for i := range n {
		port := fmt.Sprintf("sh%s%d", id, i)
		ports = append(ports, port)
		fmt.Fprintf(&add, "link add %s type veth peer name %sp\nlink set %s master %s\n", port, port, port, bridge)
		fmt.Fprintf(&del, "link del %s\n", port)
	}
	fmt.Fprintf(&del, "link del %s\n", bridge)
	t.Cleanup(func() {
		cmd := exec.Command("ip", "-force", "-batch", "-")
		cmd.Stdin = strings.NewReader(del.String())
		if out, err := cmd.CombinedOutput(); err != nil {
			t.Errorf("remove the test bridge: %v: %s", err, out)
		}
	})
	cmd := exec.Command("ip", "-batch", "-")
	cmd.Stdin = strings.NewReader(add.String())
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("make the test bridge: %v: %s", err, out)
	}
	return bridge, ports
}

// openTestPolicy opens the policy of bridge alone.
func openTestPolicy(t testing.TB, bridge string) *policy {
	t.Helper()
	br := bridgeSet{subnet: netip.MustParsePrefix("10.79.0.0/24"), bits: 24, names: []string{bridge}, ports: DefaultBridgePorts}
	p, err := openPolicy(br, filepath.Join(t.TempDir(), "netns"), slog.New(slog.DiscardHandler))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { p.close(true) })
	return p
}

// syscalls returns the read and write system calls this process made so
// far (/proc/self/io).
func syscalls(t testing.TB) (int64, int64) {
	b, err := os.ReadFile("/proc/self/io")
	if err != nil {
		t.Fatal(err)
	}
	var r, w int64
	for _, l := range strings.Split(string(b), "\n") {
		k, v, _ := strings.Cut(l, ": ")
		switch k {
		case "syscr":
			r, _ = strconv.ParseInt(v, 10, 64)
		case "syscw":
			w, _ = strconv.ParseInt(v, 10, 64)
		}
	}
	return r, w
}

// BenchmarkPolicyHeal is the guard's pass (every PolicyCheck) over a
// bridge with 0, 50 and 200 ports, all isolated: its time, and its read and
// write system calls (reads/op, writes/op).
func BenchmarkPolicyHeal(b *testing.B) {
	for _, n := range []int{0, 50, 200} {
		b.Run(fmt.Sprintf("ports=%d", n), func(b *testing.B) {
			bridge, _ := testBridgePorts(b, n)
			p := openTestPolicy(b, bridge)
			if err := p.heal(); err != nil {
				b.Fatal(err)
			}
			r0, w0 := syscalls(b)
			b.ResetTimer()
			for range b.N {
				if err := p.heal(); err != nil {
					b.Fatal(err)
				}
			}
			b.StopTimer()
			r1, w1 := syscalls(b)
			b.ReportMetric(float64(r1-r0)/float64(b.N), "reads/op")
			b.ReportMetric(float64(w1-w0)/float64(b.N), "writes/op")
		})
	}
}

// isolated reports whether port's isolated flag is set.
func isolated(t testing.TB, port string) bool {
	t.Helper()
	b, err := os.ReadFile("/sys/class/net/" + port + "/brport/isolated")
	if err != nil {
		t.Fatal(err)
	}
	return strings.TrimSpace(string(b)) == "1"
}

// waitIsolated waits until port is isolated, without a guard's pass.
func waitIsolated(t *testing.T, port, what string) {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for !isolated(t, port) {
		if time.Now().After(deadline) {
			t.Fatalf("%s: port %s is not isolated again", what, port)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// A bridge port whose isolated flag someone clears, or a port added to the
// bridge, is isolated at once, as the kernel tells of it, not at the
// guard's next pass; one cleared untold is isolated by the guard's pass,
// which checks a few ports in turn and sweeps them all only when
// notifications were lost.
func TestPortIsolatedAsTheKernelTells(t *testing.T) {
	bridge, ports := testBridgePorts(t, 3)
	p := openTestPolicy(t, bridge)
	for _, port := range ports {
		if !isolated(t, port) {
			t.Fatalf("port %s not isolated when the policy opened", port)
		}
	}
	if err := os.WriteFile("/sys/class/net/"+ports[1]+"/brport/isolated", []byte("0"), 0o644); err != nil {
		t.Fatal(err)
	}
	waitIsolated(t, ports[1], "cleared through sysfs")
	if out, err := exec.Command("ip", "link", "set", ports[2], "type", "bridge_slave", "isolated", "off").CombinedOutput(); err != nil {
		t.Fatalf("ip link: %v: %s", err, out)
	}
	// No notification tells of this one: the guard's next pass checks
	// the ports in turn (three, all of them here).
	if err := p.heal(); err != nil {
		t.Fatal(err)
	}
	if !isolated(t, ports[2]) {
		t.Fatalf("port %s cleared through its link info is not isolated after the guard's pass", ports[2])
	}
	late := ports[0] + "x"
	if out, err := exec.Command("ip", "link", "add", late, "type", "veth", "peer", "name", late+"p").CombinedOutput(); err != nil {
		t.Fatalf("ip link: %v: %s", err, out)
	}
	t.Cleanup(func() { deleteLink(late) })
	if out, err := exec.Command("ip", "link", "set", late, "master", bridge).CombinedOutput(); err != nil {
		t.Fatalf("ip link: %v: %s", err, out)
	}
	waitIsolated(t, late, "added to the bridge")

	p.mu.Lock()
	before := p.sweeps
	p.mu.Unlock()
	for range 3 {
		if err := p.heal(); err != nil {
			t.Fatal(err)
		}
	}
	p.mu.Lock()
	after := p.sweeps
	p.mu.Unlock()
	if after != before {
		t.Fatalf("the guard swept every port %d times while the notifications came; want none", after-before)
	}
	// Notifications lost (the socket's buffer overran): the next pass
	// checks every port.
	p.watch.lost.Store(true)
	if err := p.heal(); err != nil {
		t.Fatal(err)
	}
	p.mu.Lock()
	after = p.sweeps
	p.mu.Unlock()
	if after != before+1 {
		t.Fatalf("after lost notifications the guard swept %d times; want 1", after-before)
	}
}

// The guard's pass checks rotatePorts ports, in turn: a flag cleared
// untold (no notification read) on each of 40 ports is set again on 16 a
// pass, on all of them within three.
func TestGuardChecksPortsInTurn(t *testing.T) {
	bridge, ports := testBridgePorts(t, 40)
	p := openTestPolicy(t, bridge)
	// Untold: the notifications stop here (the ports stay kept).
	p.watch.close()
	var off strings.Builder
	for _, port := range ports {
		fmt.Fprintf(&off, "link set %s type bridge_slave isolated off\n", port)
	}
	cmd := exec.Command("ip", "-batch", "-")
	cmd.Stdin = strings.NewReader(off.String())
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("ip: %v: %s", err, out)
	}
	count := func() int {
		n := 0
		for _, port := range ports {
			if isolated(t, port) {
				n++
			}
		}
		return n
	}
	if n := count(); n != 0 {
		t.Fatalf("%d ports isolated after clearing them untold; want 0", n)
	}
	for pass, want := range []int{rotatePorts, 2 * rotatePorts, len(ports)} {
		if err := p.heal(); err != nil {
			t.Fatal(err)
		}
		if n := count(); n != want {
			t.Fatalf("after pass %d: %d ports isolated, want %d", pass+1, n, want)
		}
	}
}

// BenchmarkPolicyHealMembers is the guard's pass with 0, 200 and 1000
// attachments holding a policy (every replica holds one), no port.
func BenchmarkPolicyHealMembers(b *testing.B) {
	for _, n := range []int{0, 200, 1000} {
		b.Run(fmt.Sprintf("members=%d", n), func(b *testing.B) {
			bridge, _ := testBridgePorts(b, 0)
			p := openTestPolicy(b, bridge)
			for i := range n {
				ip := netip.AddrFrom4([4]byte{10, 79, byte(i / 250), byte(2 + i%250)})
				if err := p.set(fmt.Sprintf("bridge-%016x", i), member{IP: ip, Policy: Policy{App: fmt.Sprint("app", i)}}); err != nil {
					b.Fatal(err)
				}
			}
			if err := p.heal(); err != nil {
				b.Fatal(err)
			}
			b.ResetTimer()
			for range b.N {
				if err := p.heal(); err != nil {
					b.Fatal(err)
				}
			}
			b.StopTimer()
			if p.rebuilds != 0 {
				b.Fatalf("%d rebuilds", p.rebuilds)
			}
		})
	}
}

// The guard's pass checks the table against what it must hold as of the
// last change (kept, not worked out again each pass): a member set or
// dropped, or a host port allowed, is no cause for a rebuild, and a set
// emptied from outside still is.
func TestGuardWantsTheLastChange(t *testing.T) {
	bridge, _ := testBridgePorts(t, 0)
	p := openTestPolicy(t, bridge)
	heal := func(what string, rebuilds uint64) {
		t.Helper()
		if err := p.heal(); err != nil {
			t.Fatal(err)
		}
		p.mu.Lock()
		n := p.rebuilds
		p.mu.Unlock()
		if n != rebuilds {
			t.Fatalf("after %s: %d rebuilds, want %d", what, n, rebuilds)
		}
	}
	heal("opening", 0)
	ip := netip.MustParseAddr("10.79.0.2")
	if err := p.set("bridge-0000000000000001", member{IP: ip, Policy: Policy{App: "a", Egress: EgressNone}}); err != nil {
		t.Fatal(err)
	}
	heal("a member set", 0)
	if err := p.set("bridge-0000000000000002", member{IP: netip.MustParseAddr("10.79.0.3"), Policy: Policy{App: "b", Allow: []string{"a"}}}); err != nil {
		t.Fatal(err)
	}
	heal("a member allowing the other set", 0)
	if err := p.drop("bridge-0000000000000001"); err != nil {
		t.Fatal(err)
	}
	heal("a member dropped", 0)
	if err := p.allowPort(4242); err != nil {
		t.Fatal(err)
	}
	heal("a host port allowed", 0)
	if out, err := exec.Command("nft", "flush", "set", "inet", bridge, "ports").CombinedOutput(); err != nil {
		t.Fatalf("nft: %v: %s", err, out)
	}
	heal("the ports set flushed from outside", 1)
	heal("the rebuild", 1)
}
