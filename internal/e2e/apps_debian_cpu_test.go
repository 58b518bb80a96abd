package e2e

import (
	"context"
	"os/exec"
	"strings"
	"testing"
	"time"
)

// TestDebianApacheCPUFollowsDemand: Debian's Apache with mod_php at 0.3 of
// a core (max_cpu 0.6, one replica) under ab -c 50 through the proxy has
// its quota raised while the load runs, and not lowered before it ends:
// 50 requests wait on a replica that uses its whole quota, or whose
// workers wait for a CPU (PSI, where its cgroup tells), whether or not it
// is throttled in 80% of its CFS periods. The rule judged throttling
// alone before: on a busy host, where the replica waits for a CPU the
// host's other work holds, it was throttled in under 1% of its periods
// and its quota was never raised; where it was raised, it swung back to
// 0.3 within 0.5-2 s while 50-100 requests were still in flight.
func TestDebianApacheCPUFollowsDemand(t *testing.T) {
	if _, err := exec.LookPath("ab"); err != nil {
		t.Fatalf("ab (apache2-utils; scripts/install-deps.sh test installs it): %v", err)
	}
	d := startDaemon(t)
	d.debianImage("apache-php")
	const name = "demand-apache"
	t.Cleanup(func() {
		if t.Failed() {
			t.Logf("%s's log:\n%.4000s", name, d.shoal("app", "logs", name).stdout)
		}
	})
	d.deploy(`name = "` + name + `"
image = "debian-apache-php:1"
port = 80
[scale]
min = 1
max = 1
[resources]
cpu = 0.3
max_cpu = 0.6
memory = "256Mi"
pids = 256
[health]
tcp = true
`)
	proxy := d.proxyAddr()
	if code, body, _ := get(t, proxy, name, "/"); code != 200 || !strings.Contains(body, "PHP Version") {
		t.Fatalf("GET /: %d %.200s", code, body)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	began := time.Now()
	ab := exec.CommandContext(ctx, "ab", "-q", "-c", "50", "-t", "10", "-n", "50000", "-s", "60",
		"-H", "Host: "+name+".localhost", "http://"+proxy+"/")
	b, err := ab.CombinedOutput()
	ended := time.Now()
	if err != nil {
		t.Fatalf("ab: %v\n%s", err, b)
	}
	report := string(b)
	t.Logf("ab -c 50 -t 10 through the proxy:\n%s", abSummary(report))
	if !abNoFailures.MatchString(report) || strings.Contains(report, "Non-2xx responses") {
		t.Fatalf("requests failed under load:\n%s", report)
	}
	var raised time.Time
	for _, e := range d.events(name, "cpu") {
		t.Logf("cpu event at %s: %s", e.Time.Sub(began).Round(time.Millisecond), e.Reason)
		if e.Time.Before(began) || e.Time.After(ended) {
			continue
		}
		switch {
		case e.Inputs["to"] > e.Inputs["from"] && raised.IsZero():
			raised = e.Time
		case e.Inputs["to"] < e.Inputs["from"] && !raised.IsZero():
			t.Errorf("quota lowered %s into the load, 50 requests still in flight: %s", e.Time.Sub(began).Round(time.Millisecond), e.Reason)
		}
	}
	if raised.IsZero() {
		t.Fatalf("the quota was not raised during the load (%s)", ended.Sub(began).Round(time.Millisecond))
	}
}
