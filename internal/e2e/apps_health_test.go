package e2e

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/shoal-run/shoal/internal/api/types"
)

// The only replica of an app fails its health check: it leaves the route
// table, the app shows as failing with the reason, a request waits in the
// queue and gets 503 after queue_timeout, and the app recovers when the
// check passes again. The check reads a file from the app's shared volume,
// so this also shows the volume.
func TestAppHealthCheckFailure(t *testing.T) {
	d := startDaemon(t)
	d.busybox("busybox:1")
	www := filepath.Join(d.dataDir, "apps", "web", "volumes", "www")
	if err := os.MkdirAll(www, 0o755); err != nil {
		t.Fatal(err)
	}
	ok := filepath.Join(www, "ok.txt")
	os.WriteFile(ok, []byte("fine\n"), 0o644)
	d.deploy(`
name = "web"
image = "busybox:1"
command = ["sh", "-c", "httpd -f -p 8080 -h /www & trap 'kill $!; exit' TERM; wait"]
[scale]
min = 1
queue_timeout = "1s"
[health]
http = "/ok.txt"
interval = "100ms"
failures = 2
[volumes]
www = "/www"
`)
	d.waitApp("web", "ready", func(a types.App) bool { return a.Ready == 1 })
	proxy := d.proxyAddr()
	if code, body, _ := get(t, proxy, "web", "/ok.txt"); code != 200 || body != "fine\n" {
		t.Fatalf("file from the shared volume: %d %q", code, body)
	}
	os.Remove(ok)
	a := d.waitApp("web", "the unhealthy replica leaves", func(a types.App) bool { return a.Ready == 0 && a.State == "failing" })
	if !strings.Contains(a.Error, "health") {
		t.Fatalf("failing app's error: %q", a.Error)
	}
	if code, _, _ := get(t, proxy, "web", "/ok.txt"); code != 503 {
		t.Fatalf("request with no healthy replica: %d, want 503 after the queue timeout", code)
	}
	os.WriteFile(ok, []byte("fine again\n"), 0o644)
	d.waitApp("web", "a healthy replica again", func(a types.App) bool { return a.Ready == 1 && a.State == "running" })
	if code, body, _ := get(t, proxy, "web", "/ok.txt"); code != 200 || body != "fine again\n" {
		t.Fatalf("after recovery: %d %q", code, body)
	}
}

// webPerReplica is an app of two busybox httpd replicas, each serving its
// own folder of the shared volume www: /www/<replica id>, with index.html
// holding its id and ok.txt for the health check. Removing one replica's
// ok.txt on the host makes that replica alone unhealthy. The shell stays as
// PID 1 to pass SIGTERM on (httpd as PID 1 would ignore it until SIGKILL).
const webPerReplica = `
name = "web"
image = "busybox:1"
command = ["sh", "-c", "d=/www/$SHOAL_REPLICA; mkdir -p $d; echo $SHOAL_REPLICA > $d/index.html; echo ok > $d/ok.txt; httpd -f -p 8080 -h $d & trap 'kill $!; exit' TERM; wait"]
[scale]
min = 2
max = 2
[health]
http = "/ok.txt"
interval = "100ms"
failures = 2
[volumes]
www = "/www"
`

// With two replicas, one that fails its health check is taken out of the
// route table and replaced while steady traffic through the proxy sees no
// failed request; the app ends with two healthy replicas again.
func TestAppOneReplicaUnhealthy(t *testing.T) {
	d := startDaemon(t)
	d.checkUnhealthyReplaced(webPerReplica, func(proxy string) *steady {
		return startSteady(proxy, "web", "/", 2, 20000, 5*time.Millisecond)
	}, "health")
}
