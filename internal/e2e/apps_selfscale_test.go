package e2e

import (
	"os"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/shoal-run/shoal/internal/api/types"
)

// selfscaleManifest is the example's own shoal.toml with thresholds the
// test's load crosses quickly.
func selfscaleManifest(t *testing.T) string {
	b, err := os.ReadFile(filepath.Join("..", "..", "examples", "selfscale", "shoal.toml"))
	if err != nil {
		t.Fatal(err)
	}
	m := string(b)
	for old, new := range map[string]string{
		`HIGH_RPS = "200"`: `HIGH_RPS = "80"`,
		`LOW_RPS  = "20"`:  `LOW_RPS  = "15"`,
		`COOLDOWN = "5s"`:  `COOLDOWN = "2s"`,
		"max = 4 ":         "max = 3 ",
	} {
		if !strings.Contains(m, old) {
			t.Fatalf("examples/selfscale/shoal.toml has no %q", old)
		}
		m = strings.Replace(m, old, new, 1)
	}
	return m
}

// The selfscale example scales itself: under a load step it asks for
// replicas (up to max, where the platform refuses), and when the load
// falls back its extra replicas halt and die while requests go on; none
// fails.
func TestSelfscaleExample(t *testing.T) {
	d := startDaemon(t)
	d.exampleImage("selfscale")
	d.deploy(selfscaleManifest(t))
	d.waitApp("selfscale", "one ready replica", func(a types.App) bool { return a.Ready == 1 })
	proxy := d.proxyAddr()

	var most atomic.Int64
	stop := make(chan struct{})
	watched := make(chan struct{})
	go func() {
		defer close(watched)
		for {
			if a, err := d.appQuiet("selfscale"); err == nil && int64(a.Ready) > most.Load() {
				most.Store(int64(a.Ready))
			}
			select {
			case <-stop:
				return
			case <-time.After(50 * time.Millisecond):
			}
		}
	}()
	defer func() {
		select {
		case <-stop:
		default:
			close(stop)
		}
		<-watched
	}()

	// A low load first: the lone replica stays alone.
	low := startSteady(proxy, "selfscale", "/", 1, 100000, 100*time.Millisecond)
	defer low.end()
	time.Sleep(3 * time.Second)
	if m := most.Load(); m != 1 {
		t.Fatalf("%d replicas under a low load", m)
	}
	// The step: several hundred requests a second.
	high := startSteady(proxy, "selfscale", "/", 4, 60000, time.Millisecond)
	waitFor(t, "the app scales itself out", func() bool { return most.Load() >= 2 })
	time.Sleep(5 * time.Second)
	high.end()
	// Back to the low load: the extra replicas leave on their own.
	a := d.waitApp("selfscale", "back to one serving replica", func(a types.App) bool {
		return a.Ready == 1 && len(a.Replicas) == 1
	})
	time.Sleep(time.Second)
	low.end()
	if high.failed+low.failed != 0 {
		t.Fatalf("%d of %d requests failed while the app scaled itself; first: %s %s",
			high.failed+low.failed, high.n+low.n, high.first, low.first)
	}
	if len(high.by) < 2 {
		t.Fatalf("the step was served by %d replica(s)", len(high.by))
	}
	var replicated, died int
	for _, e := range d.events("selfscale", "self") {
		switch {
		case strings.HasPrefix(e.Reason, "replicate:"):
			replicated++
		case strings.HasPrefix(e.Reason, "die:"):
			died++
		}
	}
	if replicated == 0 || died < int(most.Load())-1 {
		t.Fatalf("%d replicate and %d die calls for a peak of %d replicas", replicated, died, most.Load())
	}
	// Each replica that died had its access log merged into the logs
	// volume: one line per request it answered, exactly once.
	for _, e := range d.events("selfscale", "self") {
		if !strings.HasPrefix(e.Reason, "die:") {
			continue
		}
		waitFor(t, "the access log of "+e.Replica+" is merged", func() bool {
			for _, m := range d.events("selfscale", "merge") {
				if m.Replica == e.Replica {
					return true
				}
			}
			return false
		})
		b, err := os.ReadFile(filepath.Join(d.dataDir, "apps", "selfscale", "volumes", "logs", "access.log"))
		if err != nil {
			t.Fatal(err)
		}
		if got, want := strings.Count(string(b), " "+e.Replica+" GET "), high.by[e.Replica]+low.by[e.Replica]; got != want {
			t.Fatalf("the merged access log has %d lines of %s, which answered %d requests", got, e.Replica, want)
		}
	}
	t.Logf("peak %d replicas; %d requests in the step, %d at low load, none failed; %d replicate and %d die calls; left %s",
		most.Load(), high.n, low.n, replicated, died, a.Replicas[0].ID)
}
