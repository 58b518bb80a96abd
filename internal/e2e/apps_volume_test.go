package e2e

import (
	"strings"
	"testing"

	"github.com/shoal-run/shoal/internal/api/types"
)

// What a replica writes to the app's shared volume is there for the
// replica that replaces it: the app scales to zero (its replica freezes,
// then stops) and the next request starts a new replica, which reads the
// first one's line from the volume. (The shell stays as PID 1 to pass
// SIGTERM on to httpd, which as PID 1 would ignore it.)
func TestAppVolumeSurvivesReplacement(t *testing.T) {
	d := startDaemon(t)
	d.busybox("busybox:1")
	d.deploy(`
name = "notes"
image = "busybox:1"
command = ["sh", "-c", "echo $SHOAL_REPLICA >> /data/boots.txt; httpd -f -p 8080 -h /data & trap 'kill $!; exit' TERM; wait"]
[scale]
min = 1
idle_timeout = "300ms"
freeze_timeout = "1s"
[health]
http = "/boots.txt"
[volumes]
data = "/data"
`)
	a := d.waitApp("notes", "ready", func(a types.App) bool { return a.Ready == 1 })
	first := a.Replicas[0].ID
	proxy := d.proxyAddr()
	if code, body, _ := get(t, proxy, "notes", "/boots.txt"); code != 200 || body != first+"\n" {
		t.Fatalf("boots.txt from %s: %d %q", first, code, body)
	}
	d.must("app", "scale", "notes", "--min", "0")
	d.waitApp("notes", "the replica freezes and stops", func(a types.App) bool { return len(a.Replicas) == 0 })
	code, body, _ := get(t, proxy, "notes", "/boots.txt")
	lines := strings.Split(strings.TrimSpace(body), "\n")
	if code != 200 || len(lines) != 2 || lines[0] != first || lines[1] == first {
		t.Fatalf("boots.txt after the replacement: %d %q; want %s's line, then the new replica's", code, body, first)
	}
	a = d.app("notes")
	if len(a.Replicas) != 1 || a.Replicas[0].ID != lines[1] {
		t.Fatalf("the new replica wrote %q; replicas: %+v", lines[1], a.Replicas)
	}
}
