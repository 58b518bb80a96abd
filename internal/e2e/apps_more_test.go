package e2e

import (
	"bytes"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/shoal-run/shoal/internal/api/types"
)

// Concurrent CPU-bound load scales cpuburn out past one replica without a
// failed request, and the replicas freeze once the load is gone.
func TestAppScaleOutUnderLoad(t *testing.T) {
	d := startDaemon(t)
	d.exampleImage("cpuburn")
	d.deploy(`
name = "burn"
image = "cpuburn:1"
[scale]
max = 3
target_concurrency = 1
idle_timeout = "500ms"
[resources]
cpu = 0.25
[health]
http = "/healthz"
`)
	proxy := d.proxyAddr()
	var most atomic.Int64
	stop := make(chan struct{})
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		for {
			select {
			case <-stop:
				return
			case <-time.After(50 * time.Millisecond):
			}
			if a, err := d.appQuiet("burn"); err == nil && int64(a.Ready) > most.Load() {
				most.Store(int64(a.Ready))
			}
		}
	}()
	failed, first := load(t, proxy, "burn", "/?ms=20", 300, 6)
	close(stop)
	wg.Wait()
	if failed != 0 {
		t.Fatalf("%d of 300 requests failed; first: %s", failed, first)
	}
	if most.Load() < 2 {
		t.Fatalf("at most %d ready replica under 6 concurrent requests with target 1", most.Load())
	}
	d.waitApp("burn", "every replica freezes once idle", func(a types.App) bool {
		return a.Ready == 0 && replicasIn(a, "frozen") >= 1
	})
}

// Replicas older than max_lifetime are replaced under steady traffic
// without a failed request.
func TestAppMaxLifetimeUnderLoad(t *testing.T) {
	d := startDaemon(t)
	d.exampleImage("hello")
	d.deploy(`
name = "hello"
image = "hello:1"
[scale]
min = 1
max_lifetime = "1s"
drain_timeout = "5s"
[health]
http = "/healthz"
`)
	d.waitApp("hello", "ready", func(a types.App) bool { return a.Ready == 1 })
	proxy := d.proxyAddr()
	seen := map[string]bool{}
	fails := 0
	for i := 0; i < 20000 && len(seen) < 3; i++ {
		req, _ := http.NewRequest(http.MethodGet, "http://"+proxy+"/", nil)
		req.Host = "hello.localhost"
		resp, err := client.Do(req)
		if err != nil {
			t.Fatalf("request %d: %v", i, err)
		}
		resp.Body.Close()
		if resp.StatusCode != 200 {
			fails++
		}
		seen[resp.Header.Get("X-Replica")] = true
		time.Sleep(2 * time.Millisecond)
	}
	if fails != 0 || len(seen) < 3 {
		t.Fatalf("%d failed requests; replicas that answered: %v (want 3 generations)", fails, seen)
	}
}

// Bad input: an invalid manifest and a missing image are refused naming
// the field; an app that crashes at boot fails its deploy (exit 1 with the
// reason) and shows as failing with its log; a
// body over the limit gets 413; a deleted app leaves nothing behind.
func TestAppBadInput(t *testing.T) {
	d := startDaemon(t)
	d.busybox("busybox:1")
	d.exampleImage("hello")
	dir := t.TempDir()
	write := func(name, text string) string {
		p := filepath.Join(dir, name)
		os.WriteFile(p, []byte(text), 0o644)
		return p
	}
	for _, c := range []struct{ manifest, field string }{
		{"name = \"x\"\nimage = \"hello:1\"\n[scale]\nmxa = 3\n", "scale.mxa"},
		{"name = \"x\"\nimage = \"hello:1\"\n[scale]\nmin = 5\nmax = 2\n", "scale"},
		{"name = \"Bad_Name\"\nimage = \"hello:1\"\n", "name"},
		{"name = \"x\"\nimage = \"nosuch:1\"\n", "image"},
		{"name = \"x\"\nimage = \"hello:1\"\n[volumes]\na = \"/a\"\nb = \"/b\"\n[state]\ndir = \"/state\"\nmerge = \"append\"\n", "state.volume"},
		{"name = \"x\"\nimage = \"hello:1\"\n[volumes]\na = \"/a\"\n[state]\ndir = \"/state\"\nmerge = \"hook\"\n", "state.hook"},
	} {
		r := d.shoal("app", "deploy", "-f", write("bad.toml", c.manifest))
		if r.code != 2 || !strings.Contains(r.stderr, c.field) {
			t.Errorf("deploy %q: exit %d, stderr %q; want 2 naming %s", c.manifest, r.code, r.stderr, c.field)
		}
	}
	if r := d.shoal("app", "deploy", "-f", filepath.Join(dir, "missing.toml")); r.code != 2 || !strings.Contains(r.stderr, "missing.toml") {
		t.Errorf("deploy of a missing file: exit %d, stderr %q", r.code, r.stderr)
	}
	if out := d.must("app", "ls"); strings.Contains(out, "x ") {
		t.Errorf("a refused deploy left an app: %s", out)
	}

	// deploy waits for the first replicas and says why they never became
	// ready.
	r := d.shoal("app", "deploy", "-f", write("crash.toml", `
name = "crash"
image = "busybox:1"
command = ["sh", "-c", "echo loading settings; echo settings.yml is broken >&2; exit 3"]
[scale]
min = 1
`))
	if r.code != 1 || !strings.Contains(r.stderr, "revision 1 failed") || !strings.Contains(r.stderr, "exited with code 3") {
		t.Fatalf("deploy of an app that crashes at boot: exit %d, stderr %q", r.code, r.stderr)
	}
	a := d.waitApp("crash", "the crash shows", func(a types.App) bool { return a.State == "failing" })
	if !strings.Contains(a.Error, "exited with code 3") || !strings.Contains(strings.Join(a.Log, "\n"), "settings.yml is broken") {
		t.Fatalf("failing app: error %q, log %q", a.Error, a.Log)
	}

	d.deploy(`
name = "hello"
image = "hello:1"
[resources]
max_body = "1Ki"
`)
	proxy := d.proxyAddr()
	req, _ := http.NewRequest(http.MethodPost, "http://"+proxy+"/", bytes.NewReader(make([]byte, 4096)))
	req.Host = "hello.localhost"
	resp, err := client.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusRequestEntityTooLarge {
		t.Fatalf("4 KiB body with max_body 1Ki: %s", resp.Status)
	}
	if code, _, _ := get(t, proxy, "hello", "/"); code != 200 {
		t.Fatalf("small request: %d", code)
	}
	d.must("app", "rm", "hello")
	if code, body, _ := get(t, proxy, "hello", "/"); code != 404 || !strings.Contains(body, "error") {
		t.Fatalf("request for a deleted app: %d %q", code, body)
	}
	if r := d.shoal("app", "status", "hello"); r.code == 0 {
		t.Fatalf("status of a deleted app: %s", r.stdout)
	}
	for _, c := range d.ps() {
		if strings.HasPrefix(c.ID, "hello-") {
			t.Fatalf("deleted app left container %s", c.ID)
		}
	}
	if _, err := os.Stat(filepath.Join(d.dataDir, "apps", "hello")); !os.IsNotExist(err) {
		t.Fatalf("deleted app left its folder: %v", err)
	}
}

// Deleting an app answers 503 for it at once, lets the request in flight
// finish, and then forgets the app (404).
func TestAppDeleteDrains(t *testing.T) {
	d := startDaemon(t)
	d.exampleImage("cpuburn")
	d.deploy(`
name = "burn"
image = "cpuburn:1"
[scale]
min = 1
[resources]
cpu = 1
`)
	d.waitApp("burn", "ready", func(a types.App) bool { return a.Ready == 1 })
	proxy := d.proxyAddr()
	slow := slowRequest(proxy, "burn", 2000)
	d.waitApp("burn", "the slow request is in flight", func(a types.App) bool {
		return len(a.Replicas) == 1 && a.Replicas[0].InFlight == 1
	})
	removed := make(chan result, 1)
	go func() { removed <- d.shoal("app", "rm", "burn") }()
	saw503 := false
	for i := 0; i < 500; i++ {
		code, body, _ := get(t, proxy, "burn", "/?ms=0")
		if code == 503 && strings.Contains(body, "deleted") {
			saw503 = true
			break
		}
		if code == 404 {
			break
		}
		time.Sleep(10 * time.Millisecond)
	}
	if st := <-slow; st != "200 OK" {
		t.Fatalf("the request in flight during the delete: %s", st)
	}
	if r := <-removed; r.code != 0 {
		t.Fatalf("app rm: %s", r.stderr)
	}
	if !saw503 {
		t.Fatal("no 503 for the app while it was being deleted")
	}
	if code, _, _ := get(t, proxy, "burn", "/"); code != 404 {
		t.Fatalf("after the delete: %d, want 404", code)
	}
}
