package e2e

import (
	"context"
	"os/exec"
	"regexp"
	"strings"
	"sync"
	"testing"
	"time"
)

// TestBusyReplicaStaysRouted: Debian's Apache with mod_php at 0.3 of a core
// (no more: max_cpu = cpu, max = 1) under ab -c 50 through the proxy,
// with an HTTP check of its phpinfo() page that a request queued behind 50
// others cannot pass in 300 ms. The replica answers the load, which proves
// it alive: it never leaves the route (no app status says it fails its
// check, no health event says it left), and no request fails.
func TestBusyReplicaStaysRouted(t *testing.T) {
	const name = "busy-apache"
	d, proxy := startApachePHP(t, name, "0.3", `http = "/"
interval = "500ms"
timeout = "300ms"
`)

	// Watch the app's status while the load runs.
	var mu sync.Mutex
	var out []string
	stop := make(chan struct{})
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		for {
			select {
			case <-stop:
				return
			case <-time.After(20 * time.Millisecond):
			}
			a, err := d.appQuiet(name)
			if err != nil {
				continue
			}
			for _, r := range a.Replicas {
				if r.State == "ready" && r.Reason == "failing its health check" {
					mu.Lock()
					out = append(out, r.ID)
					mu.Unlock()
				}
			}
		}
	}()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	ab := exec.CommandContext(ctx, "ab", "-q", "-c", "50", "-t", "6", "-n", "50000", "-s", "60",
		"-H", "Host: "+name+".localhost", "http://"+proxy+"/")
	b, err := ab.CombinedOutput()
	close(stop)
	wg.Wait()
	if err != nil {
		t.Fatalf("ab: %v\n%s", err, b)
	}
	report := string(b)
	t.Logf("ab -c 50 -t 6 through the proxy:\n%s", abSummary(report))
	// phpinfo()'s length varies with the request: ab's "Length" failures
	// are none.
	if !abNoFailures.MatchString(report) || strings.Contains(report, "Non-2xx responses") {
		t.Fatalf("requests failed under load:\n%s", report)
	}
	if len(out) > 0 {
		t.Fatalf("the busy replica was out of the route (failing its health check) in %d status polls", len(out))
	}
	for _, e := range d.events(name, "health") {
		t.Errorf("health event: %s %s", e.Replica, e.Reason)
	}
}

// startApachePHP starts a daemon and deploys Debian's Apache with mod_php
// as app name, one replica at 0.3 of a core and at most maxCPU, with
// health as its [health] section; it fails the test without ab, or if the
// app's phpinfo() page does not answer through the proxy, and logs the
// app's log when the test fails. It returns the daemon and the proxy's
// address.
func startApachePHP(t *testing.T, name, maxCPU, health string) (*daemon, string) {
	t.Helper()
	if _, err := exec.LookPath("ab"); err != nil {
		t.Fatalf("ab (apache2-utils; scripts/install-deps.sh test installs it): %v", err)
	}
	d := startDaemon(t)
	d.debianImage("apache-php")
	t.Cleanup(func() {
		if t.Failed() {
			t.Logf("%s's log:\n%.4000s", name, d.shoal("app", "logs", name).stdout)
		}
	})
	if r, _ := d.deployFile(`name = "` + name + `"
image = "debian-apache-php:1"
port = 80
[scale]
min = 1
max = 1
[resources]
cpu = 0.3
max_cpu = ` + maxCPU + `
memory = "256Mi"
pids = 256
[health]
` + health); r.code != 0 {
		t.Fatalf("deploy: %s%s", r.stdout, r.stderr)
	}
	proxy := d.proxyAddr()
	if code, body, _ := get(t, proxy, name, "/"); code != 200 || !strings.Contains(body, "PHP Version") {
		t.Fatalf("GET /: %d %.200s", code, body)
	}
	return d, proxy
}

// abNoFailures matches ab's report of no failed request but for a length
// other than the first answer's.
var abNoFailures = regexp.MustCompile(`Failed requests: +0\n|\(Connect: 0, Receive: 0, Length: \d+, Exceptions: 0\)`)

// abSummary is the lines of ab's report worth a log.
func abSummary(report string) string {
	var keep []string
	for _, l := range strings.Split(report, "\n") {
		for _, p := range []string{"Complete requests", "Failed requests", "Non-2xx", "Requests per second", "  50%", "  99%", " 100%"} {
			if strings.HasPrefix(l, p) {
				keep = append(keep, l)
			}
		}
	}
	return strings.Join(keep, "\n")
}
