package e2e

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/shoal-run/shoal/internal/api/types"
)

// nginxConf runs Debian's nginx as root on :80 with workers as www-data;
// at its start nginx makes its temporary folders and chowns them to
// www-data.
const nginxConf = `user www-data;
worker_processes 2;
pid /run/nginx.pid;
error_log /dev/stderr;
events { worker_connections 64; }
http {
	include /etc/nginx/mime.types;
	access_log /var/log/nginx/access.log;
	server {
		listen 80;
		root /srv/www;
		location /whoami { return 200 "served\n"; }
	}
}
`

// nginxRootfs builds, from the host's installed nginx (package nginx, in
// the test set of scripts/install-deps.sh), a root file system that runs
// it: the binary with the libraries ldd names, /etc/nginx, an account
// database with www-data (33), and a page.
func nginxRootfs(t *testing.T) string {
	t.Helper()
	bin, err := exec.LookPath("nginx")
	if err != nil {
		t.Fatalf("nginx is needed (apt-get install nginx): %v", err)
	}
	dir := filepath.Join(t.TempDir(), "rootfs")
	files := []string{bin}
	out, err := exec.Command("ldd", bin).Output()
	if err != nil {
		t.Fatalf("ldd %s: %v", bin, err)
	}
	for _, l := range strings.Split(string(out), "\n") {
		for _, f := range strings.Fields(l) {
			if strings.HasPrefix(f, "/") {
				files = append(files, f)
			}
		}
	}
	for _, f := range files {
		dst := filepath.Join(dir, f)
		if err := os.MkdirAll(filepath.Dir(dst), 0o755); err != nil {
			t.Fatal(err)
		}
		if out, err := exec.Command("cp", "-L", f, dst).CombinedOutput(); err != nil {
			t.Fatalf("cp %s: %v %s", f, err, out)
		}
	}
	for _, d := range []string{"etc", "var/lib/nginx", "var/log/nginx", "run", "tmp", "srv/www"} {
		if err := os.MkdirAll(filepath.Join(dir, d), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	if out, err := exec.Command("cp", "-a", "/etc/nginx", filepath.Join(dir, "etc")).CombinedOutput(); err != nil {
		t.Fatalf("cp /etc/nginx: %v %s", err, out)
	}
	write := map[string]string{
		"etc/nginx/nginx.conf": nginxConf,
		"etc/passwd":           "root:x:0:0:root:/root:/bin/sh\nwww-data:x:33:33:www-data:/var/www:/usr/sbin/nologin\n",
		"etc/group":            "root:x:0:\nwww-data:x:33:\n",
		"etc/nsswitch.conf":    "passwd: files\ngroup: files\n",
		"srv/www/index.html":   "hello from nginx\n",
	}
	for name, content := range write {
		if err := os.WriteFile(filepath.Join(dir, name), []byte(content), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	return dir
}

// statusIDs are the real uid and gid of process pid.
func statusIDs(t *testing.T, pid int) (uid, gid uint64) {
	t.Helper()
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		t.Fatal(err)
	}
	for _, l := range strings.Split(string(b), "\n") {
		f := strings.Fields(l)
		if len(f) > 1 && f[0] == "Uid:" {
			uid, _ = strconv.ParseUint(f[1], 10, 64)
		}
		if len(f) > 1 && f[0] == "Gid:" {
			gid, _ = strconv.ParseUint(f[1], 10, 64)
		}
	}
	return uid, gid
}

// TestAppUserNamespaceNginx: Debian's nginx, as root in its app's user
// namespace, binds :80, makes and chowns its temporary folders, and runs
// its workers as www-data of the app's range; it answers through the
// proxy.
func TestAppUserNamespaceNginx(t *testing.T) {
	d := startDaemon(t)
	d.must("image", "build", nginxRootfs(t), "--tag", "nginx:test", "--cmd", "/usr/sbin/nginx")
	t.Cleanup(func() {
		if t.Failed() {
			t.Logf("nginx's log:\n%s", d.shoal("app", "logs", "nginx").stdout)
		}
	})
	d.deploy(`
name = "nginx"
image = "nginx:test"
port = 80
command = ["/usr/sbin/nginx", "-g", "daemon off;"]
[scale]
min = 1
max = 1
`)
	a := d.waitApp("nginx", "a ready replica", func(a types.App) bool { return a.Ready == 1 })
	pid := a.Replicas[0].Pid
	host, _ := uidMap(t, pid)
	if host < 1<<31 {
		t.Fatalf("nginx runs as host id %d", host)
	}
	// The replica's process (shoal-init or nginx itself) and everything
	// below it: one nginx master as the range's root, two workers as its
	// www-data. Ready is the master listening: its workers may not be
	// forked yet, or not yet have dropped to www-data.
	var masters, workers int
	for deadline := time.Now().Add(30 * time.Second); ; time.Sleep(100 * time.Millisecond) {
		masters, workers = 0, 0
		for _, p := range append([]int{pid}, descendantPids(t, pid)...) {
			comm, _ := os.ReadFile(fmt.Sprintf("/proc/%d/comm", p))
			if strings.TrimSpace(string(comm)) != "nginx" {
				continue
			}
			switch uid, gid := statusIDs(t, p); {
			case uid == host && gid == host:
				masters++
			case uid == host+33 && gid == host+33:
				workers++
			default:
				t.Fatalf("nginx process %d runs as %d:%d, neither the range's root %d nor its www-data", p, uid, gid, host)
			}
		}
		if masters == 1 && workers == 2 || time.Now().After(deadline) {
			break
		}
	}
	if masters != 1 || workers != 2 {
		t.Fatalf("%d nginx masters as the range's root and %d workers as its www-data after 30s, want 1 and 2", masters, workers)
	}
	if code, body, _ := get(t, d.proxyAddr(), "nginx", "/"); code != 200 || body != "hello from nginx\n" {
		t.Fatalf("GET /: %d %q", code, body)
	}
	if code, body, _ := get(t, d.proxyAddr(), "nginx", "/whoami"); code != 200 || body != "served\n" {
		t.Fatalf("GET /whoami: %d %q", code, body)
	}
}

// descendantPids lists the processes below pid.
func descendantPids(t *testing.T, pid int) []int {
	t.Helper()
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/task/%d/children", pid, pid))
	if err != nil {
		t.Fatal(err)
	}
	var out []int
	for _, f := range strings.Fields(string(b)) {
		c, _ := strconv.Atoi(f)
		out = append(out, c)
		out = append(out, descendantPids(t, c)...)
	}
	return out
}
