package e2e

import (
	"fmt"
	"strings"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/shoal-run/shoal/internal/api/types"
)

const helloManifest = `
name = "hello"
image = "hello:1"
port = 8080
[scale]
min = 0
max = 4
idle_timeout = "%s"
freeze_timeout = "%s"
[health]
http = "/healthz"
`

func manifest(idle, freeze string) string { return fmt.Sprintf(helloManifest, idle, freeze) }

// A request for an app with no replica starts one and is answered; the app
// then has one ready replica with a pid and a start time.
func TestAppScaleFromZero(t *testing.T) {
	d := startDaemon(t)
	d.exampleImage("hello")
	d.deploy(manifest("1m", "10m"))
	if a := d.app("hello"); len(a.Replicas) != 0 || a.State != "idle" {
		t.Fatalf("a fresh app with min 0 has replicas: %+v", a)
	}
	proxy := d.proxyAddr()
	code, body, rep := get(t, proxy, "hello", "/")
	if code != 200 || !strings.HasPrefix(body, "hello from ") {
		t.Fatalf("first request: %d %q", code, body)
	}
	a := d.app("hello")
	if len(a.Replicas) != 1 || a.Replicas[0].State != "ready" || a.Replicas[0].Pid == 0 || a.Replicas[0].StartedAt.IsZero() {
		t.Fatalf("after the first request: %+v", a.Replicas)
	}
	if a.Replicas[0].ID != rep {
		t.Fatalf("request answered by %q, status lists %q", rep, a.Replicas[0].ID)
	}
	if failed, first := load(t, proxy, "hello", "/", 200, 8); failed != 0 {
		t.Fatalf("%d of 200 requests failed; first: %s", failed, first)
	}
	if code, body, _ := get(t, proxy, "nosuchapp", "/"); code != 404 || !strings.Contains(body, `"error"`) {
		t.Fatalf("unknown host: %d %q", code, body)
	}
}

// A burst of 50 requests at once to an app with no replica is answered in
// full: the requests wait in the queue while the first replica boots, and
// the app never runs more replicas than its max.
func TestAppBurstFromZero(t *testing.T) {
	d := startDaemon(t)
	d.exampleImage("hello")
	d.deploy(manifest("1m", "10m"))
	if a := d.app("hello"); len(a.Replicas) != 0 {
		t.Fatalf("a fresh app with min 0 has replicas: %+v", a.Replicas)
	}
	proxy := d.proxyAddr()
	// Watch the replica count while the burst runs.
	var most atomic.Int64
	stop := make(chan struct{})
	watched := make(chan struct{})
	go func() {
		defer close(watched)
		for {
			if a, err := d.appQuiet("hello"); err == nil && int64(len(a.Replicas)) > most.Load() {
				most.Store(int64(len(a.Replicas)))
			}
			select {
			case <-stop:
				return
			case <-time.After(20 * time.Millisecond):
			}
		}
	}()
	const n = 50
	failed, first, by := burst(t, proxy, "hello", "/", n)
	close(stop)
	<-watched
	if failed != 0 {
		t.Fatalf("%d of %d requests in a burst from zero failed; first: %s", failed, n, first)
	}
	total := 0
	for _, k := range by {
		total += k
	}
	t.Logf("answers by replica: %v; most replicas seen: %d", by, most.Load())
	if total != n || len(by) > 4 {
		t.Fatalf("answers by replica: %v; want %d answers from at most 4 replicas", by, n)
	}
	a := d.app("hello")
	if most.Load() > 4 || len(a.Replicas) > 4 {
		t.Fatalf("up to %d replicas during the burst, %d after (max 4): %+v", most.Load(), len(a.Replicas), a.Replicas)
	}
	for rep := range by {
		found := false
		for _, r := range a.Replicas {
			found = found || r.ID == rep
		}
		if !found {
			t.Fatalf("replica %q answered but is not listed: %+v", rep, a.Replicas)
		}
	}
}

// An idle replica freezes, a request thaws the same replica, and a replica
// frozen for freeze_timeout stops; the next request starts a new one.
func TestAppFreezeThawStop(t *testing.T) {
	d := startDaemon(t)
	d.exampleImage("hello")
	d.deploy(manifest("300ms", "2s"))
	proxy := d.proxyAddr()
	_, _, first := get(t, proxy, "hello", "/")
	d.waitApp("hello", "the idle replica freezes", func(a types.App) bool { return replicasIn(a, "frozen") == 1 })
	code, _, again := get(t, proxy, "hello", "/")
	if code != 200 || again != first {
		t.Fatalf("request to a frozen app: %d from %q, want 200 from the thawed %q", code, again, first)
	}
	d.waitApp("hello", "the frozen replica stops", func(a types.App) bool { return len(a.Replicas) == 0 })
	code, _, fresh := get(t, proxy, "hello", "/")
	if code != 200 || fresh == first || fresh == "" {
		t.Fatalf("request after stop: %d from %q (old %q)", code, fresh, first)
	}
}

// A daemon killed with SIGKILL leaves its replica running; the next daemon
// adopts it (same pid) and routes to it.
func TestAppAdoptedAfterDaemonKill(t *testing.T) {
	d := startDaemon(t)
	d.exampleImage("hello")
	d.deploy(strings.Replace(manifest("1m", "10m"), "min = 0", "min = 1", 1))
	a := d.waitApp("hello", "min replica ready", func(a types.App) bool { return a.Ready == 1 })
	pid, id := a.Replicas[0].Pid, a.Replicas[0].ID
	d.stop(syscall.SIGKILL)
	d.start()
	a = d.waitApp("hello", "the replica is adopted", func(a types.App) bool { return a.Ready == 1 })
	if a.Replicas[0].Pid != pid || a.Replicas[0].ID != id || len(a.Replicas) != 1 {
		t.Fatalf("after restart: %+v, want %s with pid %d", a.Replicas, id, pid)
	}
	if code, _, rep := get(t, d.proxyAddr(), "hello", "/"); code != 200 || rep != id {
		t.Fatalf("request after restart: %d from %q", code, rep)
	}
}

// After a restart, an app whose only replica is frozen still answers: the
// request thaws the adopted replica.
func TestAppFrozenAdoptedAfterRestart(t *testing.T) {
	d := startDaemon(t)
	d.exampleImage("hello")
	d.deploy(manifest("300ms", "10m"))
	_, _, first := get(t, d.proxyAddr(), "hello", "/")
	d.waitApp("hello", "frozen", func(a types.App) bool { return replicasIn(a, "frozen") == 1 })
	d.stop(syscall.SIGTERM)
	d.start()
	a := d.app("hello")
	if replicasIn(a, "frozen") != 1 {
		t.Fatalf("after restart: %+v, want the frozen replica adopted", a.Replicas)
	}
	if code, _, rep := get(t, d.proxyAddr(), "hello", "/"); code != 200 || rep != first {
		t.Fatalf("request after restart: %d from %q, want 200 from %q", code, rep, first)
	}
}
