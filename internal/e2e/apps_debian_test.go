package e2e

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/shoal-run/shoal/internal/api/types"
)

// debianImage builds Debian example image name with
// scripts/debian-images.sh (mmdebstrap from Debian's mirror; minutes the
// first time, nothing once cached under /var/cache/shoal/debian-images)
// and imports it as debian-NAME:1, as examples/debian/NAME/shoal.toml says.
// It returns that manifest's path.
func (d *daemon) debianImage(name string) string {
	d.t.Helper()
	return d.debianImageAs(name, "debian-"+name+":1", filepath.Join("examples", "debian", name, "shoal.toml"))
}

// debianImageAs builds Debian image name, imports it as tag and returns
// the path of manifest (relative to the source tree).
func (d *daemon) debianImageAs(name, tag, manifest string) string {
	d.t.Helper()
	for _, tool := range []string{"mmdebstrap", "umoci"} {
		if _, err := exec.LookPath(tool); err != nil {
			d.t.Fatalf("%s is needed to build the Debian example images (scripts/install-deps.sh test installs it): %v", tool, err)
		}
	}
	root, err := filepath.Abs(filepath.Join("..", ".."))
	if err != nil {
		d.t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 25*time.Minute)
	defer cancel()
	start := time.Now()
	var out, errb bytes.Buffer
	cmd := exec.CommandContext(ctx, "sh", filepath.Join(root, "scripts", "debian-images.sh"), name)
	cmd.Stdout, cmd.Stderr = &out, &errb
	// On time out the whole build goes (mmdebstrap is the script's
	// grandchild), with SIGTERM so the script's and mmdebstrap's own
	// clean-up run; then the pipes are not waited for past WaitDelay.
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	cmd.Cancel = func() error { return syscall.Kill(-cmd.Process.Pid, syscall.SIGTERM) }
	cmd.WaitDelay = time.Minute
	if err := cmd.Run(); err != nil {
		d.t.Fatalf("scripts/debian-images.sh %s: %v\n%s", name, err, errb.String())
	}
	tar := strings.TrimSpace(out.String())
	d.t.Logf("scripts/debian-images.sh %s: %s in %v", name, tar, time.Since(start).Round(time.Millisecond))

	// The import unpacks some 200 MB: more than the CLI helper's bound on
	// a busy host.
	start = time.Now()
	ictx, icancel := context.WithTimeout(context.Background(), 10*time.Minute)
	defer icancel()
	imp := exec.CommandContext(ictx, shoalBin, "image", "import", tar, "--tag", tag)
	imp.Env = append(os.Environ(), "SHOAL_HOST=unix://"+d.sock)
	if b, err := imp.CombinedOutput(); err != nil {
		d.t.Fatalf("shoal image import %s: %v\n%s", tar, err, b)
	}
	d.t.Logf("shoal image import %s: %v", name, time.Since(start).Round(time.Millisecond))
	return filepath.Join(root, manifest)
}

// debianApp deploys Debian example app name from its shoal.toml and
// returns the proxy's address. On failure the test's log gets the app's.
func (d *daemon) debianApp(name string) string {
	d.t.Helper()
	manifest := d.debianImage(name)
	d.t.Cleanup(func() {
		if d.t.Failed() {
			d.t.Logf("%s's log:\n%s", name, d.shoal("app", "logs", name).stdout)
		}
	})
	d.must("app", "deploy", "-f", manifest)
	return d.proxyAddr()
}

// TestDebianApachePHP: Debian's Apache with mod_php, built from Debian's
// packages and deployed with its example shoal.toml, cold-starts on the
// first request and answers phpinfo() through the proxy, then a burst of
// requests without a failure; it resolves its own hostname (no AH00557).
func TestDebianApachePHP(t *testing.T) {
	d := startDaemon(t)
	proxy := d.debianApp("apache-php")
	start := time.Now()
	code, body, _ := get(t, proxy, "apache-php", "/")
	t.Logf("first request (a cold start of Apache): %v", time.Since(start).Round(time.Millisecond))
	if code != 200 || !strings.Contains(body, "PHP Version") || !strings.Contains(body, "apache2handler") {
		t.Fatalf("GET /: %d, %d bytes, want 200 and phpinfo() of mod_php:\n%.400s", code, len(body), body)
	}
	if failed, first := load(t, proxy, "apache-php", "/", 200, 8); failed > 0 {
		t.Fatalf("%d of 200 requests failed, the first: %s", failed, first)
	}
	logs := d.must("app", "logs", "apache-php")
	if strings.Contains(logs, "AH00557") || !strings.Contains(logs, "GET / HTTP/1.1\" 200") {
		t.Fatalf("Apache's log (error and access log on the replica's output) warns AH00557 or lacks the requests:\n%s", logs)
	}
}

// TestDebianPython: a python3 http.server app on Debian's packages,
// deployed with its example shoal.toml, runs as the image's user nobody
// (the app's range's 65534) in each ready replica, also those the load
// scaled out to, and answers through the proxy.
func TestDebianPython(t *testing.T) {
	d := startDaemon(t)
	proxy := d.debianApp("python")
	code, body, _ := get(t, proxy, "python", "/")
	if code != 200 || !strings.HasPrefix(body, "hello from python 3.") {
		t.Fatalf("GET /: %d %q", code, body)
	}
	if failed, first := load(t, proxy, "python", "/", 100, 4); failed > 0 {
		t.Fatalf("%d of 100 requests failed, the first: %s", failed, first)
	}
	// The example may scale out under the load (max = 4): every ready
	// replica is checked; one still starting may not run python yet.
	a := d.app("python")
	checked := 0
	for _, r := range a.Replicas {
		if r.State != "ready" {
			continue
		}
		if r.Pid == 0 {
			t.Fatalf("ready replica %s has no pid: %+v", r.ID, a.Replicas)
		}
		host, _ := uidMap(t, r.Pid)
		var pythons []string
		for _, p := range append([]int{r.Pid}, descendantPids(t, r.Pid)...) {
			comm, _ := os.ReadFile(fmt.Sprintf("/proc/%d/comm", p))
			if !strings.HasPrefix(strings.TrimSpace(string(comm)), "python3") {
				continue
			}
			uid, gid := statusIDs(t, p)
			pythons = append(pythons, fmt.Sprintf("%d:%d", uid, gid))
			if uid != host+65534 || gid != host+65534 {
				t.Fatalf("replica %s: python runs as host ids %d:%d, want the range's nobody %d", r.ID, uid, gid, host+65534)
			}
		}
		if len(pythons) != 1 {
			t.Fatalf("python processes of replica %s: %v, want one", r.ID, pythons)
		}
		checked++
	}
	if checked == 0 {
		t.Fatalf("no ready replica after the load: %+v", a.Replicas)
	}
}

// TestDebianNginx: Debian's nginx, deployed with its example shoal.toml,
// serves its static page through the proxy; stopped with the image's
// StopSignal (SIGQUIT, nginx's graceful stop; examples/debian/nginx sets
// none of its own), passed on by shoal-init, it shuts down gracefully: its
// worker stops listening but finishes the request a client is still
// sending, answers it, and nginx then exits by itself, long before the
// stop_timeout (5m here) would end it with SIGKILL. SIGTERM would be
// nginx's fast stop: the connection cut at once.
func TestDebianNginx(t *testing.T) {
	d := startDaemon(t)
	manifest := d.debianImage("nginx")
	raw, err := os.ReadFile(manifest)
	if err != nil {
		t.Fatal(err)
	}
	if strings.Contains(string(raw), "stop_signal") {
		t.Fatalf("%s sets stop_signal: the test is of the image's StopSignal", manifest)
	}
	t.Cleanup(func() {
		if t.Failed() {
			t.Logf("nginx's log:\n%s", d.shoal("app", "logs", "nginx").stdout)
		}
	})
	d.deploy(strings.Replace(string(raw), "\n[scale]", "\nstop_timeout = \"5m\"\n\n[scale]", 1))
	proxy := d.proxyAddr()
	code, body, _ := get(t, proxy, "nginx", "/")
	if code != 200 || body != "hello from Debian's nginx\n" {
		t.Fatalf("GET / through the proxy: %d %q", code, body)
	}
	if failed, first := load(t, proxy, "nginx", "/", 200, 8); failed > 0 {
		t.Fatalf("%d of 200 requests failed, the first: %s", failed, first)
	}
	a := d.waitApp("nginx", "a ready replica", func(a types.App) bool { return a.Ready == 1 && len(a.Replicas) == 1 })
	r := a.Replicas[0]

	// A client straight to the replica that has sent part of its request.
	conn, err := net.DialTimeout("tcp", r.Addr, 10*time.Second)
	if err != nil {
		t.Fatalf("connect to the replica at %s: %v", r.Addr, err)
	}
	defer conn.Close()
	if _, err := conn.Write([]byte("GET / HTTP/1.1\r\nHost: nginx\r\n")); err != nil {
		t.Fatal(err)
	}
	removed := make(chan result, 1)
	go func() { removed <- d.shoal("app", "rm", "nginx") }()
	waitFor(t, "an nginx worker shutting down gracefully (SIGQUIT)", func() bool {
		for _, p := range procTree(r.Pid) {
			if cmd, _ := os.ReadFile(fmt.Sprintf("/proc/%d/cmdline", p)); strings.Contains(string(cmd), "worker process is shutting down") {
				return true
			}
		}
		return false
	})
	if _, err := conn.Write([]byte("\r\n")); err != nil {
		t.Fatalf("finish the request during the graceful stop: %v", err)
	}
	conn.SetReadDeadline(time.Now().Add(time.Minute))
	resp, err := io.ReadAll(conn)
	if err != nil || !strings.HasPrefix(string(resp), "HTTP/1.1 200 OK\r\n") || !strings.HasSuffix(string(resp), "\r\n\r\nhello from Debian's nginx\n") {
		t.Fatalf("the request in flight during the stop: %v\n%s", err, resp)
	}
	waitFor(t, "the replica stopped by itself", func() bool {
		_, err := os.Stat(filepath.Join("/proc", strconv.Itoa(r.Pid)))
		return os.IsNotExist(err) || strings.HasSuffix(procState(r.Pid), "Z")
	})
	if res := <-removed; res.code != 0 {
		t.Fatalf("app rm: exit %d: %s", res.code, res.stderr)
	}
}

// procTree lists pid and the processes below it that still run.
func procTree(pid int) []int {
	out := []int{pid}
	b, _ := os.ReadFile(fmt.Sprintf("/proc/%d/task/%d/children", pid, pid))
	for _, f := range strings.Fields(string(b)) {
		if c, err := strconv.Atoi(f); err == nil {
			out = append(out, procTree(c)...)
		}
	}
	return out
}
