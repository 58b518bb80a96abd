package e2e

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/shoal-run/shoal/internal/api/types"
	"github.com/shoal-run/shoal/internal/route"
)

// proxyProcs lists the proxy processes of this daemon (`shoal proxy-serve
// --api <its socket>`), whichever daemon started them.
func (d *daemon) proxyProcs() []int {
	var pids []int
	entries, _ := os.ReadDir("/proc")
	for _, e := range entries {
		pid, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		b, err := os.ReadFile(filepath.Join("/proc", e.Name(), "cmdline"))
		if err != nil {
			continue
		}
		args := strings.Split(string(bytes.TrimRight(b, "\x00")), "\x00")
		if slices.Contains(args, "proxy-serve") && slices.Contains(args, d.sock) {
			if st, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid)); err == nil {
				if f := strings.Fields(string(st)); len(f) > 2 && f[2] == "Z" {
					continue // exited, not yet reaped
				}
			}
			pids = append(pids, pid)
		}
	}
	return pids
}

// noProxyLeft fails the test if a proxy process of this daemon outlived
// it, and kills it.
func (d *daemon) noProxyLeft() {
	for _, pid := range d.proxyProcs() {
		d.t.Errorf("cleanup: proxy process %d outlived its daemon; killed", pid)
		syscall.Kill(pid, syscall.SIGKILL)
		gone(pid)
	}
}

// controlClient talks to the proxy process's control socket.
func (d *daemon) controlClient() *http.Client {
	path := filepath.Join(d.runDir, "proxy.sock")
	return &http.Client{Timeout: 10 * time.Second, Transport: &http.Transport{
		DialContext: func(ctx context.Context, _, _ string) (net.Conn, error) {
			var nd net.Dialer
			return nd.DialContext(ctx, "unix", path)
		},
	}}
}

// routes reads the proxy process's route table.
func (d *daemon) routes() map[string]route.Route {
	d.t.Helper()
	resp, err := d.controlClient().Get("http://proxy/v1/routes")
	if err != nil {
		d.t.Fatalf("proxy control: %v", err)
	}
	defer resp.Body.Close()
	var rs []route.Route
	if err := json.NewDecoder(resp.Body).Decode(&rs); err != nil {
		d.t.Fatalf("proxy control: routes: %v", err)
	}
	out := map[string]route.Route{}
	for _, r := range rs {
		out[r.App] = r
	}
	return out
}

// A daemon killed with SIGKILL under a steady load loses no request: its
// proxy process keeps routing to the two ready replicas while it is away,
// holds a request for a scaled-to-zero app until the restarted daemon
// wakes the app, and is adopted by the new daemon (same process), which
// pushes the route table again: the same replicas (same pids), and no app
// it does not have.
func TestDaemonKillUnderLoadLosesNothing(t *testing.T) {
	d := startDaemon(t)
	d.exampleImage("hello")
	d.deploy(strings.NewReplacer("min = 0", "min = 2", "max = 4", "max = 2").Replace(manifest("1m", "10m")))
	d.deploy(strings.Replace(manifest("1m", "10m"), `name = "hello"`, `name = "cold"`, 1))
	before := d.waitApp("hello", "two ready replicas", func(a types.App) bool { return a.Ready == 2 })
	pids := map[string]int{}
	for _, r := range before.Replicas {
		pids[r.ID] = r.Pid
	}
	proxyAddr := d.proxyAddr()
	procs := d.proxyProcs()
	if len(procs) != 1 {
		t.Fatalf("proxy processes of the daemon: %v, want one", procs)
	}

	s := startSteady(proxyAddr, "hello", "/", 6, 30000, 2*time.Millisecond)
	defer s.end()
	sent := func() int { s.mu.Lock(); defer s.mu.Unlock(); return s.n }
	waitFor(t, "requests through the proxy", func() bool { return sent() >= 200 })

	d.stop(syscall.SIGKILL)
	// While the daemon is away: requests flow, a request for the cold app
	// waits, and a route the next daemon has no app for is left behind.
	atKill := sent()
	cold := make(chan string, 1)
	go func() {
		_, msg := ask(proxyAddr, "cold", "/")
		cold <- msg
	}()
	req, _ := http.NewRequest(http.MethodPut, "http://proxy/v1/routes/ghost", strings.NewReader(`{"App":"ghost"}`))
	if resp, err := d.controlClient().Do(req); err != nil || resp.StatusCode != http.StatusNoContent {
		t.Fatalf("set a route while the daemon is away: %v %v", err, resp)
	}
	waitFor(t, "requests served while the daemon is down", func() bool { return sent() >= atKill+300 })

	d.start()
	select {
	case msg := <-cold:
		if msg != "" {
			t.Fatalf("the request for the cold app sent while the daemon was down failed: %s", msg)
		}
	case <-time.After(time.Minute):
		t.Fatal("the request for the cold app sent while the daemon was down is not answered after the restart")
	}
	atStart := sent()
	waitFor(t, "requests served after the restart", func() bool { return sent() >= atStart+300 })
	s.end()
	if s.failed != 0 {
		t.Fatalf("%d of %d requests failed across the daemon's kill and restart; first: %s", s.failed, s.n, s.first)
	}
	t.Logf("%d requests, %d of them while the daemon was down or starting, none failed", s.n, atStart-atKill)
	for id := range pids {
		if s.answered(id) == 0 {
			t.Errorf("replica %s answered nothing", id)
		}
	}

	after := d.app("hello")
	if after.Ready != 2 || len(after.Replicas) != 2 {
		t.Fatalf("after the restart: %+v, want the two replicas adopted", after.Replicas)
	}
	for _, r := range after.Replicas {
		if pids[r.ID] != r.Pid {
			t.Fatalf("after the restart replica %s has pid %d; before: %v", r.ID, r.Pid, pids)
		}
	}
	if now := d.proxyProcs(); !slices.Equal(now, procs) {
		t.Fatalf("proxy processes after the restart: %v, want %v adopted", now, procs)
	}
	if got := d.proxyAddr(); got != proxyAddr {
		t.Fatalf("proxy address after the restart: %s, want %s", got, proxyAddr)
	}
	rs := d.routes()
	if _, ok := rs["ghost"]; ok {
		t.Fatalf("the route of an app the daemon does not have is still in the proxy: %+v", rs)
	}
	var eps []string
	for _, e := range rs["hello"].Endpoints {
		eps = append(eps, e.ID)
	}
	slices.Sort(eps)
	want := make([]string, 0, len(pids))
	for id := range pids {
		want = append(want, id)
	}
	slices.Sort(want)
	if !slices.Equal(eps, want) {
		t.Fatalf("hello's route after the restart: %v, want %v", eps, want)
	}
	if c, ok := rs["cold"]; !ok || len(c.Endpoints) != 1 {
		t.Fatalf("cold's route after the restart: %+v", c)
	}
	// The daemon's /metrics still carries the proxy's.
	m := d.getText("/metrics")
	if !strings.Contains(m, `shoal_proxy_requests_total{app="hello",code="200"}`) {
		t.Fatalf("the daemon's metrics lack the proxy's:\n%s", m)
	}
}

// A proxy process that died with its daemon leaves a stale control socket:
// the next daemon starts a new proxy on the same address, and one that dies
// under a running daemon is started again with the route table.
func TestProxyProcessReplaced(t *testing.T) {
	d := startDaemon(t)
	d.exampleImage("hello")
	d.deploy(strings.Replace(manifest("1m", "10m"), "min = 0", "min = 1", 1))
	d.waitApp("hello", "a ready replica", func(a types.App) bool { return a.Ready == 1 })
	addr := d.proxyAddr()
	old := d.proxyProcs()
	if len(old) != 1 {
		t.Fatalf("proxy processes: %v, want one", old)
	}
	d.stop(syscall.SIGKILL)
	syscall.Kill(old[0], syscall.SIGKILL)
	gone(old[0])
	d.start()
	now := d.proxyProcs()
	if len(now) != 1 || now[0] == old[0] {
		t.Fatalf("proxy processes after the restart: %v (before %v), want one new", now, old)
	}
	if a := d.proxyAddr(); !strings.HasPrefix(a, "127.0.0.1:") {
		t.Fatalf("proxy address after the restart: %s", a)
	}
	addr = d.proxyAddr()
	if code, _, _ := get(t, addr, "hello", "/"); code != 200 {
		t.Fatalf("request after the restart: %d", code)
	}
	// Killed under a running daemon: a new one takes over on the same
	// address with the routes.
	syscall.Kill(now[0], syscall.SIGKILL)
	gone(now[0])
	waitFor(t, "a new proxy process", func() bool {
		p := d.proxyProcs()
		return len(p) == 1 && p[0] != now[0]
	})
	waitFor(t, "requests answered by the new proxy", func() bool {
		_, msg := ask(addr, "hello", "/")
		return msg == ""
	})
}

// A second daemon (other dirs) asked to serve the proxy address of a
// running one refuses, naming --proxy, and starts no proxy process.
func TestSecondProxyRefused(t *testing.T) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := l.Addr().String()
	l.Close()
	d := startDaemon(t, "--proxy", addr)
	if got := d.proxyAddr(); got != addr {
		t.Fatalf("proxy address %s, want %s", got, addr)
	}
	base := t.TempDir()
	second := &daemon{t: t, runDir: filepath.Join(base, "run")}
	second.sock = filepath.Join(second.runDir, "shoal.sock")
	var stderr bytes.Buffer
	cmd := exec.Command(shoalBin, "daemon", "--data-dir", filepath.Join(base, "data"), "--run-dir", second.runDir,
		"--cgroup-parent", d.cgroup+"-second", "--bridge", d.bridge+"x", "--subnet", "10.187.1.0/24", "--proxy", addr)
	cmd.Stderr = &stderr
	err = cmd.Run()
	if err == nil || !strings.Contains(stderr.String(), "--proxy "+addr) {
		t.Fatalf("second daemon on proxy address %s: %v, stderr %q", addr, err, stderr.String())
	}
	if p := second.proxyProcs(); len(p) != 0 {
		t.Errorf("the refused daemon left proxy processes %v", p)
		second.noProxyLeft()
	}
	if _, err := os.Stat("/sys/class/net/" + d.bridge + "x"); err == nil {
		t.Errorf("the refused daemon left its bridge")
		exec.Command("ip", "link", "del", d.bridge+"x").Run()
	}
	if code, _, _ := get(t, addr, "nosuchapp", "/"); code != 404 {
		t.Fatalf("the first daemon's proxy after the refusal: %d", code)
	}
}

// A daemon stopped gracefully drains its proxy process: a request in flight
// is answered, then the process exits and its control socket goes. The
// request waits (hello's /sleep), burning no CPU: its length does not grow
// with the host's load past the drain's grace.
func TestGracefulStopDrainsProxy(t *testing.T) {
	d := startDaemon(t)
	d.exampleImage("hello")
	d.deploy("name = \"sleepy\"\nimage = \"hello:1\"\n[scale]\nmin = 1\n")
	d.waitApp("sleepy", "ready", func(a types.App) bool { return a.Ready == 1 })
	proxyAddr := d.proxyAddr()
	slow := sleepRequest(proxyAddr, "sleepy", 1500)
	d.waitApp("sleepy", "the slow request is in flight", func(a types.App) bool {
		return len(a.Replicas) == 1 && a.Replicas[0].InFlight == 1
	})
	d.stop(syscall.SIGTERM)
	if st := <-slow; st != "200 OK" {
		t.Fatalf("the request in flight when the daemon stopped: %s", st)
	}
	if p := d.proxyProcs(); len(p) != 0 {
		t.Fatalf("proxy processes after a graceful stop: %v", p)
	}
	if _, err := os.Stat(filepath.Join(d.runDir, "proxy.sock")); !os.IsNotExist(err) {
		t.Fatalf("control socket after a graceful stop: %v", err)
	}
}
