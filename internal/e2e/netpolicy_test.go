package e2e

import (
	"crypto/rand"
	"fmt"
	"net"
	"net/http"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/shoal-run/shoal/internal/api/types"
)

// httpdApp is a manifest of app name: busybox's httpd answering
// "<name> <replica>" on $PORT, one replica, and extra lines at the end.
func httpdApp(name, extra string) string {
	return fmt.Sprintf(`name = %q
image = "busybox:1"
command = ["sh", "-c", "mkdir -p /tmp/www && echo %s $SHOAL_REPLICA > /tmp/www/index.html && exec httpd -f -p $PORT -h /tmp/www"]
[scale]
min = 1
max = 1
%s`, name, name, extra)
}

// readyReplica waits for app's one ready replica and returns it.
func (d *daemon) readyReplica(app string) types.Replica {
	d.t.Helper()
	a := d.waitApp(app, "a ready replica", func(a types.App) bool { return a.Ready == 1 })
	for _, r := range a.Replicas {
		if r.State == "ready" {
			return r
		}
	}
	d.t.Fatalf("app %s: no ready replica in %+v", app, a.Replicas)
	return types.Replica{}
}

// fetchFrom sends GET path to addr (host:port) from inside replica r
// (the OCI runtime's exec: the replica's namespaces, user and filters).
// A replica in a user namespace has no network namespace in its config
// (runc runs inside it), so the exec is started in the replica's network
// namespace, as the runtime's own Exec does
// and returns the whole answer, status line first, or the error with what
// nc said. (busybox-static's wget crashes in an image without glibc's
// name service files; nc does not.)
func (d *daemon) fetchFrom(r types.Replica, addr, path string) (string, error) {
	d.t.Helper()
	host, port, err := net.SplitHostPort(addr)
	if err != nil {
		d.t.Fatal(err)
	}
	script := fmt.Sprintf(`printf 'GET %s HTTP/1.0\r\nHost: %s\r\n\r\n' | nc -w 5 %s %s`, path, host, host, port)
	netns := fmt.Sprintf("--net=/proc/%d/ns/net", r.Pid)
	cmd := exec.Command("nsenter", netns, "runc", "--root", filepath.Join(d.runDir, "runc"), "exec", r.ID, "sh", "-c", script)
	out, err := cmd.CombinedOutput()
	switch {
	case err != nil:
		return "", fmt.Errorf("%w: %s", err, strings.TrimSpace(string(out)))
	case !strings.HasPrefix(string(out), "HTTP/"):
		return "", fmt.Errorf("no HTTP answer: %q", out)
	}
	return string(out), nil
}

// mustReach fails the test unless replica r gets an answer holding want
// from addr.
func (d *daemon) mustReach(what string, r types.Replica, addr, want string) {
	d.t.Helper()
	body, err := d.fetchFrom(r, addr, "/")
	if err != nil || !strings.Contains(body, want) {
		d.t.Fatalf("%s: replica %s fetching from %s: %q, %v; want an answer with %q", what, r.ID, addr, body, err, want)
	}
}

// mustNotReach fails the test if replica r gets any answer from addr.
func (d *daemon) mustNotReach(what string, r types.Replica, addr string) {
	d.t.Helper()
	if body, err := d.fetchFrom(r, addr, "/"); err == nil {
		d.t.Fatalf("%s: replica %s reached %s: %q", what, r.ID, addr, body)
	}
}

// gateway is the daemon's bridge address.
func (d *daemon) gateway() string { return strings.TrimSuffix(d.subnet, "0/24") + "1" }

// A replica of one app cannot reach another app's replica at its bridge
// address (only the proxy, on the host, reaches replicas), either way.
func TestReplicasApart(t *testing.T) {
	d := startDaemon(t)
	d.busybox("busybox:1")
	d.deploy(httpdApp("a", ""))
	d.deploy(httpdApp("b", ""))
	a, b := d.readyReplica("a"), d.readyReplica("b")
	// Each reaches itself, and the proxy reaches both.
	d.mustReach("a to itself", a, a.Addr, "a "+a.ID)
	for _, app := range []string{"a", "b"} {
		if code, body, _ := get(t, d.proxyAddr(), app, "/"); code != 200 || !strings.HasPrefix(body, app+" ") {
			t.Fatalf("app %s through the proxy: %d %q", app, code, body)
		}
	}
	d.mustNotReach("b to a's replica", b, a.Addr)
	d.mustNotReach("a to b's replica", a, b.Addr)
}

// outsideHTTP starts busybox's httpd in a network namespace of the test's
// own, joined to the host by a veth pair on a random /30 of 198.18.0.0/15
// (the benchmarking range: no private range, so it stands in for the
// internet), and returns its address.
func outsideHTTP(t *testing.T) string {
	t.Helper()
	var b [3]byte
	rand.Read(b[:])
	ns, veth := fmt.Sprintf("shoalpub%x", b), fmt.Sprintf("shpub%x", b)
	base := netip.AddrFrom4([4]byte{198, 18 + b[0]&1, b[1], b[2] &^ 3})
	host, inside := base.Next(), base.Next().Next()
	dir := t.TempDir()
	if err := os.WriteFile(filepath.Join(dir, "index.html"), []byte("outside\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		exec.Command("ip", "link", "del", veth).Run()
		exec.Command("ip", "netns", "del", ns).Run()
	})
	for _, args := range [][]string{
		{"netns", "add", ns},
		{"link", "add", veth, "type", "veth", "peer", "name", "eth0", "netns", ns},
		{"addr", "add", host.String() + "/30", "dev", veth},
		{"link", "set", veth, "up"},
		{"-n", ns, "addr", "add", inside.String() + "/30", "dev", "eth0"},
		{"-n", ns, "link", "set", "eth0", "up"},
		{"-n", ns, "route", "add", "default", "via", host.String()},
	} {
		if out, err := exec.Command("ip", args...).CombinedOutput(); err != nil {
			t.Fatalf("ip %s: %v: %s", strings.Join(args, " "), err, out)
		}
	}
	srv := exec.Command("ip", "netns", "exec", ns, "busybox", "httpd", "-f", "-p", inside.String()+":8080", "-h", dir)
	if err := srv.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		srv.Process.Kill()
		srv.Wait()
	})
	addr := inside.String() + ":8080"
	waitFor(t, "the outside server answers the host", func() bool {
		r, err := (&http.Client{Timeout: time.Second}).Get("http://" + addr + "/")
		if err != nil {
			return false
		}
		r.Body.Close()
		return r.StatusCode == 200
	})
	return addr
}

// A replica reaches no host service but the self API, even one listening
// on every address; it reaches the internet by default and not with
// egress = "none".
func TestEgress(t *testing.T) {
	d := startDaemon(t)
	d.busybox("busybox:1")
	hostL, err := net.Listen("tcp4", "0.0.0.0:0")
	if err != nil {
		t.Fatal(err)
	}
	go http.Serve(hostL, http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) { w.Write([]byte("host service\n")) }))
	defer hostL.Close()
	outside := outsideHTTP(t)
	d.deploy(httpdApp("open", ""))
	d.deploy(httpdApp("closed", "[network]\negress = \"none\"\n"))
	open, closed := d.readyReplica("open"), d.readyReplica("closed")

	hostAddr := net.JoinHostPort(d.gateway(), fmt.Sprint(hostL.Addr().(*net.TCPAddr).Port))
	for _, r := range []types.Replica{open, closed} {
		d.mustNotReach("a host service on 0.0.0.0, through the gateway", r, hostAddr)
		// The self API answers (401 without the token).
		if body, err := d.fetchFrom(r, net.JoinHostPort(d.gateway(), "7071"), "/v1/self"); err != nil || !strings.Contains(body, " 401 ") {
			t.Fatalf("replica %s calling the self API without a token: %q, %v; want a 401", r.ID, body, err)
		}
	}
	d.mustReach("public egress", open, outside, "outside")
	d.mustNotReach("egress = \"none\"", closed, outside)
}

// [network] allow lets an app's replicas reach the named app's replicas
// directly, and nothing more: not the other way, not for other apps; it
// holds across a restart of the daemon and follows replicas that come and
// go.
func TestNetworkAllow(t *testing.T) {
	d := startDaemon(t)
	d.busybox("busybox:1")
	d.deploy(httpdApp("db", ""))
	d.deploy(httpdApp("web", "[network]\nallow = [\"db\"]\n"))
	d.deploy(httpdApp("other", ""))
	db, web, other := d.readyReplica("db"), d.readyReplica("web"), d.readyReplica("other")
	check := func(when string, db types.Replica) {
		t.Helper()
		d.mustReach("web to db "+when, web, db.Addr, "db "+db.ID)
		d.mustNotReach("db to web "+when, db, web.Addr)
		d.mustNotReach("other to db "+when, other, db.Addr)
	}
	check("", db)

	d.stop(syscall.SIGTERM)
	d.start()
	check("after a restart", db)

	// db's next replica (its first one killed) is reached; the rules of
	// the one gone are gone.
	if err := syscall.Kill(db.Pid, syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	var next types.Replica
	d.waitApp("db", "a new ready replica", func(a types.App) bool {
		for _, r := range a.Replicas {
			if r.State == "ready" && r.ID != db.ID {
				next = r
				return true
			}
		}
		return false
	})
	check("after db's replica was replaced", next)
	if next.Addr != db.Addr {
		out, err := exec.Command("nft", "list", "set", "inet", d.bridge, "pairs").CombinedOutput()
		if err != nil {
			t.Fatalf("nft list set: %v: %s", err, out)
		}
		oldIP, _, _ := net.SplitHostPort(db.Addr)
		if strings.Contains(string(out), " . "+oldIP+" ") || strings.Contains(string(out), " . "+oldIP+"\n") || strings.Contains(string(out), " . "+oldIP+",") {
			t.Fatalf("the pair of db's old replica %s outlived it:\n%s", oldIP, out)
		}
	}
}
