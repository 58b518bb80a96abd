package e2e

import (
	"fmt"
	"os"
	"strings"
	"sync"
	"testing"

	"github.com/shoal-run/shoal/internal/api/types"
)

const checkpointManifest = `
name = "%s"
image = "slowboot:1"
port = 8080
[scale]
min = 0
max = 1
idle_timeout = "1s"
freeze_timeout = "2s"
[env]
BOOT_DELAY = "1500ms"
[health]
http = "/healthz"
`

// checkpointEvent waits for app's checkpoint event whose message holds
// want, failing the test on a failed dump or restore.
func (d *daemon) checkpointEvent(app, want string) types.Event {
	d.t.Helper()
	var got types.Event
	waitForLong(d.t, "a checkpoint event: "+want, func() bool {
		for _, e := range d.events(app, "checkpoint") {
			if strings.Contains(e.Reason, "failed") {
				d.t.Fatalf("checkpoint event: %s", e.Reason)
			}
			if strings.Contains(e.Reason, want) {
				got = e
				return true
			}
		}
		return false
	})
	return got
}

// TestCheckpointTierUserNS: an app in a user namespace of its own (the
// default) walks down the tiers: its idle replica is frozen, then dumped
// to disk with CRIU, and the next requests, sent at once through the
// proxy, all reach the restored process (the same start time), back in
// the app's user namespace; none fails.
func TestCheckpointTierUserNS(t *testing.T) {
	d := startDaemon(t)
	d.exampleImage("slowboot")
	d.deploy(fmt.Sprintf(checkpointManifest, "ck"))
	code, first, _ := get(t, d.proxyAddr(), "ck", "/")
	if code != 200 || !strings.HasPrefix(first, "slowboot from ") {
		t.Fatalf("first request: %d %q", code, first)
	}
	dumped := d.checkpointEvent("ck", "checkpointed to disk")
	d.waitApp("ck", "the checkpointed replica gone", func(a types.App) bool { return len(a.Replicas) == 0 })
	const n = 8
	var wg sync.WaitGroup
	bodies, fails := make([]string, n), make([]string, n)
	for i := range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			bodies[i], fails[i] = ask(d.proxyAddr(), "ck", "/")
		}()
	}
	wg.Wait()
	for i := range n {
		if fails[i] != "" || bodies[i] != strings.TrimSpace(first) {
			t.Fatalf("request %d after the checkpoint: %q %s; want the dumped process's %q", i, bodies[i], fails[i], first)
		}
	}
	restored := d.checkpointEvent("ck", "restored from the checkpoint of "+dumped.Replica)
	t.Logf("dump: %s; restore: %s", dumped.Reason, restored.Reason)
	a := d.app("ck")
	if len(a.Replicas) != 1 || a.Replicas[0].ID != restored.Replica {
		t.Fatalf("replicas after the restore: %+v, want %s", a.Replicas, restored.Replica)
	}
	m, err := os.ReadFile(fmt.Sprintf("/proc/%d/uid_map", d.runcPid(restored.Replica)))
	if f := strings.Fields(string(m)); err != nil || len(f) != 3 || f[0] != "0" || f[1] == "0" {
		t.Fatalf("restored replica's uid map %q (%v): want the app's own range", m, err)
	}
}
