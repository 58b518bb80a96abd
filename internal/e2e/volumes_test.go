package e2e

import (
	"archive/tar"
	"bytes"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"syscall"
	"testing"

	"github.com/shoal-run/shoal/internal/api/types"
	"github.com/shoal-run/shoal/internal/image/imagetest"
)

// busyboxWith builds a busybox image tagged tag with the files files
// (path → content, mode 0640; image build makes them root's) added to it.
func (d *daemon) busyboxWith(tag string, files map[string]string) {
	d.t.Helper()
	dir := filepath.Join(d.t.TempDir(), "rootfs")
	if err := imagetest.BusyboxDir(dir); err != nil {
		d.t.Fatalf("busybox-static is needed: %v", err)
	}
	for p, body := range files {
		p = filepath.Join(dir, p)
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			d.t.Fatal(err)
		}
		if err := os.WriteFile(p, []byte(body), 0o640); err != nil {
			d.t.Fatal(err)
		}
	}
	d.must("image", "build", dir, "--tag", tag, "--cmd", "/bin/sh")
}

// owner is the owner and mode of host path p.
func owner(t *testing.T, p string) (uint64, uint64, os.FileMode) {
	t.Helper()
	fi, err := os.Lstat(p)
	if err != nil {
		t.Fatal(err)
	}
	st := fi.Sys().(*syscall.Stat_t)
	return uint64(st.Uid), uint64(st.Gid), fi.Mode()
}

// TestVolumeCopyUp: a new volume is filled with what the image has at its
// path (owners and modes kept, in the app's user namespace), its root
// belongs to the volume's uid and gid, so the app's user nobody writes
// there; a volume already there is not filled again.
func TestVolumeCopyUp(t *testing.T) {
	d := startDaemon(t)
	d.busyboxWith("site:1", map[string]string{"srv/www/index.html": "from the image\n", "srv/www/sub/page.html": "page\n"})
	d.deploy(`
name = "site"
image = "site:1"
command = ["sh", "-c", "busybox su -s /bin/sh nobody -c 'id -u > /srv/www/writer' && exec httpd -f -p 8080 -h /srv/www"]
[scale]
min = 1
max = 1
idle_timeout = "300ms"
freeze_timeout = "1s"
[health]
http = "/writer"
[volumes]
www = { path = "/srv/www", uid = 65534, gid = 65534 }
`)
	a := d.waitApp("site", "a ready replica", func(a types.App) bool { return a.Ready == 1 })
	host, _ := uidMap(t, a.Replicas[0].Pid)
	proxy := d.proxyAddr()
	for path, want := range map[string]string{"/index.html": "from the image\n", "/sub/page.html": "page\n", "/writer": "65534\n"} {
		if code, body, _ := get(t, proxy, "site", path); code != 200 || body != want {
			t.Fatalf("GET %s: %d %q, want %q", path, code, body, want)
		}
	}
	vol := filepath.Join(d.dataDir, "apps", "site", "volumes", "www")
	if u, g, m := owner(t, filepath.Join(vol, "index.html")); u != host || g != host || m.Perm() != 0o640 {
		t.Fatalf("copied file: owner %d:%d mode %v, want the image's root in the range, %d, 0640", u, g, m, host)
	}
	if u, g, _ := owner(t, vol); u != host+65534 || g != host+65534 {
		t.Fatalf("volume root: owner %d:%d, want uid and gid 65534 of the range (%d)", u, g, host+65534)
	}
	// Filled once: what the app removed stays removed.
	if err := os.Remove(filepath.Join(vol, "sub", "page.html")); err != nil {
		t.Fatal(err)
	}
	d.must("app", "scale", "site", "--min", "0")
	d.waitApp("site", "no replica", func(a types.App) bool { return len(a.Replicas) == 0 })
	d.must("app", "scale", "site", "--min", "1")
	d.waitApp("site", "a ready replica again", func(a types.App) bool { return a.Ready == 1 })
	if code, _, _ := get(t, proxy, "site", "/sub/page.html"); code != 404 {
		t.Fatalf("a file removed from the volume is back: %d", code)
	}
	left, _ := filepath.Glob(filepath.Join(vol, "..", ".*"))
	if len(left) != 0 {
		t.Fatalf("left beside the volume: %v", left)
	}
	if strings.Contains(d.must("app", "status", "site"), "failing") {
		t.Fatal("app failing")
	}
}

// TestVolumeImageUser: Debian's python image runs as its user nobody; a
// volume over its app's folder is filled with the image's app and belongs
// to nobody, who writes there, and the app runs from it.
func TestVolumeImageUser(t *testing.T) {
	d := startDaemon(t)
	d.debianImage("python")
	d.deploy(`
name = "pyvol"
image = "debian-python:1"
command = ["/bin/sh", "-c", "id -u > /srv/app/whoami && exec python3 /srv/app/app.py"]
[scale]
min = 1
max = 1
[health]
http = "/healthz"
[volumes]
app = "/srv/app"
`)
	a := d.waitApp("pyvol", "a ready replica", func(a types.App) bool { return a.Ready == 1 })
	host, _ := uidMap(t, a.Replicas[0].Pid)
	vol := filepath.Join(d.dataDir, "apps", "pyvol", "volumes", "app")
	if b, err := os.ReadFile(filepath.Join(vol, "whoami")); err != nil || string(b) != "65534\n" {
		t.Fatalf("whoami written by the app: %q %v", b, err)
	}
	if _, err := os.Stat(filepath.Join(vol, "app.py")); err != nil {
		t.Fatalf("the image's app.py is not in the volume: %v", err)
	}
	if u, g, _ := owner(t, vol); u != host+65534 || g != host+65534 {
		t.Fatalf("volume root: owner %d:%d, want the image's user nobody in the range (%d)", u, g, host+65534)
	}
	if code, _, _ := get(t, d.proxyAddr(), "pyvol", "/healthz"); code != 200 {
		t.Fatalf("GET /healthz: %d", code)
	}
}

// tarOf is a tar of files (name → content; a name ending in "|fifo" is a
// FIFO).
func tarOf(t *testing.T, files map[string]string) []byte {
	t.Helper()
	var b bytes.Buffer
	tw := tar.NewWriter(&b)
	for name, body := range files {
		h := &tar.Header{Name: name, Mode: 0o644, Size: int64(len(body)), Typeflag: tar.TypeReg}
		if n, ok := strings.CutSuffix(name, "|fifo"); ok {
			h = &tar.Header{Name: n, Mode: 0o644, Typeflag: tar.TypeFifo}
		}
		if err := tw.WriteHeader(h); err != nil {
			t.Fatal(err)
		}
		if h.Typeflag == tar.TypeReg {
			tw.Write([]byte(body))
		}
	}
	if err := tw.Close(); err != nil {
		t.Fatal(err)
	}
	return b.Bytes()
}

// TestVolumeCommands: files go into a volume and come out with shoal
// volume cp, export and import (a bad archive changes nothing); app rm
// keeps the volume, listed as kept and mounted again by the app deployed
// again; volume rm refuses a volume in use; app rm --volumes removes it.
func TestVolumeCommands(t *testing.T) {
	d := startDaemon(t)
	d.busybox("busybox:1")
	const app = `
name = "notes"
image = "busybox:1"
command = ["httpd", "-f", "-p", "8080", "-h", "/data"]
[scale]
min = 1
max = 1
[health]
tcp = true
[volumes]
data = "/data"
`
	d.deploy(app)
	d.waitApp("notes", "a ready replica", func(a types.App) bool { return a.Ready == 1 })
	proxy := d.proxyAddr()
	vol := filepath.Join(d.dataDir, "apps", "notes", "volumes", "data")
	local := t.TempDir()
	if err := os.WriteFile(filepath.Join(local, "hello.txt"), []byte("hello\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	d.must("volume", "cp", filepath.Join(local, "hello.txt"), "notes:data:/")
	if code, body, _ := get(t, proxy, "notes", "/hello.txt"); code != 200 || body != "hello\n" {
		t.Fatalf("GET /hello.txt after volume cp: %d %q", code, body)
	}
	if ls := d.must("volume", "ls"); !regexp.MustCompile(`notes\s+data\s+/data\s+in use`).MatchString(ls) {
		t.Fatalf("volume ls:\n%s", ls)
	}
	d.must("volume", "cp", "notes:data:/hello.txt", filepath.Join(local, "out.txt"))
	if b, err := os.ReadFile(filepath.Join(local, "out.txt")); err != nil || string(b) != "hello\n" {
		t.Fatalf("copied out: %q %v", b, err)
	}
	d.must("volume", "export", "notes:data", "-o", filepath.Join(local, "data.tar"))
	if out, err := exec.Command("tar", "-tf", filepath.Join(local, "data.tar")).CombinedOutput(); err != nil || !strings.Contains(string(out), "hello.txt") {
		t.Fatalf("exported tar: %s %v", out, err)
	}
	// A bad archive, or one with a FIFO, changes nothing.
	for _, bad := range [][]byte{tarOf(t, map[string]string{"a.txt": strings.Repeat("a", 2000)})[:1000],
		tarOf(t, map[string]string{"b.txt": "b", "pipe|fifo": ""})} {
		if r := d.shoalIn(bad, "volume", "import", "notes:data", "-"); r.code != 1 {
			t.Fatalf("import of a bad archive: exit %d\n%s", r.code, r.stderr)
		}
	}
	// One whose files hold more than --max-size changes nothing either
	// (bad input, exit 2).
	if r := d.shoalIn(tarOf(t, map[string]string{"c.txt": strings.Repeat("c", 2000)}), "volume", "import", "--max-size", "1KiB", "notes:data", "-"); r.code != 2 || !strings.Contains(r.stderr, "more than 1Ki") {
		t.Fatalf("import above --max-size: exit %d\n%s", r.code, r.stderr)
	}
	ents, _ := os.ReadDir(vol)
	if len(ents) != 1 {
		t.Fatalf("a refused import left %v in the volume", ents)
	}
	if left, _ := filepath.Glob(filepath.Join(vol, "..", ".*")); len(left) != 0 {
		t.Fatalf("left beside the volume: %v", left)
	}
	d.shoalIn(tarOf(t, map[string]string{"sub/imported.txt": "imported\n"}), "volume", "import", "notes:data")
	if code, body, _ := get(t, proxy, "notes", "/sub/imported.txt"); code != 200 || body != "imported\n" {
		t.Fatalf("GET /sub/imported.txt after import: %d %q", code, body)
	}
	for _, args := range [][]string{{"volume", "cp", "a", "b"}, {"volume", "rm", "notes"}, {"volume", "export"}} {
		if r := d.shoal(args...); r.code != 2 {
			t.Fatalf("shoal %v: exit %d, want 2 (usage)\n%s", args, r.code, r.stderr)
		}
	}
	if r := d.shoal("volume", "rm", "notes:data"); r.code != 1 || !strings.Contains(r.stderr, "remove the app first") {
		t.Fatalf("volume rm of a volume in use: exit %d\n%s", r.code, r.stderr)
	}

	d.must("app", "rm", "notes")
	if ls := d.must("volume", "ls"); !regexp.MustCompile(`notes\s+data\s+-\s+kept`).MatchString(ls) {
		t.Fatalf("volume ls after app rm:\n%s", ls)
	}
	d.deploy(app)
	d.waitApp("notes", "a ready replica again", func(a types.App) bool { return a.Ready == 1 })
	if code, body, _ := get(t, proxy, "notes", "/hello.txt"); code != 200 || body != "hello\n" {
		t.Fatalf("GET /hello.txt from the app deployed again: %d %q", code, body)
	}
	d.must("app", "rm", "notes", "--volumes")
	if ls := d.must("volume", "ls"); strings.Contains(ls, "notes") {
		t.Fatalf("volume ls after app rm --volumes:\n%s", ls)
	}
	if _, err := os.Stat(vol); !os.IsNotExist(err) {
		t.Fatalf("volume left after app rm --volumes: %v", err)
	}
}
