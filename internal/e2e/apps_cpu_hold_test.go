package e2e

import (
	"context"
	"io"
	"net/http"
	"sync"
	"testing"
	"time"

	"github.com/shoal-run/shoal/internal/api/types"
)

// cpuHoldApp burns CPU in the background from its start until /stop is
// asked for; /hold answers only once /release has been asked for, using
// next to no CPU meanwhile.
const cpuHoldApp = `
name = "cpuhold"
image = "cpuhold:1"
port = 8080
command = ["sh", "-c", "chmod 755 /www/cgi-bin/*; (while [ ! -e /tmp/stop ]; do :; done) & (while [ ! -e /tmp/stop ]; do :; done) & exec httpd -f -p 8080 -h /www"]
[scale]
min = 1
max = 1
[resources]
cpu = 0.02
max_cpu = 0.04
`

var cpuHoldFiles = map[string]string{
	"www/cgi-bin/stop":    "#!/bin/sh\ntouch /tmp/stop\nprintf 'Content-Type: text/plain\\r\\n\\r\\nstopped\\n'\n",
	"www/cgi-bin/release": "#!/bin/sh\ntouch /tmp/release\nprintf 'Content-Type: text/plain\\r\\n\\r\\nreleased\\n'\n",
	"www/cgi-bin/hold":    "#!/bin/sh\nwhile [ ! -e /tmp/release ]; do usleep 200000; done\nprintf 'Content-Type: text/plain\\r\\n\\r\\nheld\\n'\n",
}

// TestCPUQuotaHeldWhileRequestsWait: a replica throttled at its quota has
// it raised (0.02 → 0.04 cores); once it stops burning CPU but still has
// requests waiting on it, its quota is not lowered (a replica starved on a
// busy CPU is not throttled either, yet lowering its quota would slow it
// further): only after the requests are answered does it go back down.
// The old rule lowered it while the requests still waited.
func TestCPUQuotaHeldWhileRequestsWait(t *testing.T) {
	d := startDaemon(t)
	d.busyboxWith("cpuhold:1", cpuHoldFiles)
	d.deploy(cpuHoldApp)
	d.waitApp("cpuhold", "ready", func(a types.App) bool { return a.Ready == 1 })
	proxy := d.proxyAddr()

	// Requests that wait on the replica until released.
	var wg sync.WaitGroup
	t.Cleanup(wg.Wait) // after cancel, below
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)
	long := &http.Client{Transport: &http.Transport{Proxy: nil}}
	held := make(chan string, 3)
	for range 3 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			req, _ := http.NewRequestWithContext(ctx, http.MethodGet, "http://"+proxy+"/cgi-bin/hold", nil)
			req.Host = "cpuhold.localhost"
			resp, err := long.Do(req)
			if err != nil {
				held <- err.Error()
				return
			}
			b, _ := io.ReadAll(resp.Body)
			resp.Body.Close()
			held <- string(b)
		}()
	}

	raised := func(e types.Event) bool { return e.Inputs["to"] > e.Inputs["from"] }
	lowered := func(e types.Event) bool { return e.Inputs["to"] < e.Inputs["from"] }
	cpuEvents := func(match func(types.Event) bool) []types.Event {
		var out []types.Event
		for _, e := range d.events("cpuhold", "cpu") {
			if match(e) {
				out = append(out, e)
			}
		}
		return out
	}
	waitForLong(t, "the burning replica's quota raised", func() bool { return len(cpuEvents(raised)) > 0 })
	if code, body, _ := get(t, proxy, "cpuhold", "/cgi-bin/stop"); code != 200 {
		t.Fatalf("GET /cgi-bin/stop: %d %s", code, body)
	}
	stopped := time.Now()
	// Idle but for the waiting requests for twice what the rule waits
	// before it lowers an idle replica's quota (10 s), then released.
	for time.Since(stopped) < 25*time.Second {
		if evs := cpuEvents(lowered); len(evs) > 0 {
			t.Fatalf("quota lowered while 3 requests waited on the replica: %+v", evs[0])
		}
		time.Sleep(time.Second)
	}
	released := time.Now()
	if code, body, _ := get(t, proxy, "cpuhold", "/cgi-bin/release"); code != 200 {
		t.Fatalf("GET /cgi-bin/release: %d %s", code, body)
	}
	for range 3 {
		if got := <-held; got != "held\n" {
			t.Fatalf("a held request answered %q", got)
		}
	}
	waitForLong(t, "the idle replica's quota lowered once its requests were answered", func() bool { return len(cpuEvents(lowered)) > 0 })
	if e := cpuEvents(lowered)[0]; e.Time.Before(released) {
		t.Fatalf("quota lowered at %s, before the waiting requests were released at %s: %+v", e.Time, released, e)
	}
}

// waitForLong polls cond for up to 2 minutes.
func waitForLong(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(2 * time.Minute)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("%s: not after 2 minutes", what)
		}
		time.Sleep(500 * time.Millisecond)
	}
}
