package e2e

import (
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/shoal-run/shoal/internal/api/types"
)

// healLoad is the bounded load loop of the healing tests: 4 workers, at
// most limit requests in all, 1 ms apart per worker.
func healLoad(proxy, app string, limit int) *steady {
	return startSteady(proxy, app, "/", 4, limit, time.Millisecond)
}

// others returns the ids of a's replicas other than skip.
func others(a types.App, skip string) []string {
	var out []string
	for _, r := range a.Replicas {
		if r.ID != skip {
			out = append(out, r.ID)
		}
	}
	return out
}

// One of two ready replicas is killed with SIGKILL from outside while
// steady traffic goes through the proxy: it leaves the route at once, a
// replacement starts without a crash back-off (the replica had served) and
// becomes ready, and at most 0.1% of the requests fail (those in flight on
// the killed replica that the proxy cannot retry). The loop sends 5000
// requests; the kill comes as soon as both replicas have answered, so it
// falls in the first few hundred.
func TestAppReplicaKilled(t *testing.T) {
	d := startDaemon(t)
	d.exampleImage("hello")
	d.deploy(`
name = "hello"
image = "hello:1"
[scale]
min = 2
max = 2
`)
	a := d.waitApp("hello", "two ready replicas", func(a types.App) bool { return a.Ready == 2 })
	checkSpread(t, a)
	victim, pid := a.Replicas[0].ID, a.Replicas[0].Pid
	other := a.Replicas[1].ID
	s := healLoad(d.proxyAddr(), "hello", 5000)
	defer s.end()
	waitFor(t, "both replicas answer", func() bool { return s.answered(victim) > 0 && s.answered(other) > 0 })

	killed := time.Now()
	if err := syscall.Kill(pid, syscall.SIGKILL); err != nil {
		t.Fatalf("kill replica %s (pid %d): %v", victim, pid, err)
	}
	a = d.waitApp("hello", "a replacement is ready", func(a types.App) bool {
		return a.Ready == 2 && !slices.ContainsFunc(a.Replicas, func(r types.Replica) bool { return r.ID == victim })
	})
	took := time.Since(killed)
	checkSpread(t, a)
	var fresh string
	for _, id := range others(a, other) {
		fresh = id
	}
	waitFor(t, "the replacement answers", func() bool { return s.answered(fresh) > 0 })
	s.done.Wait() // the rest of the 5000
	t.Logf("replacement %s ready and serving within %s of the kill (status polled every 20 ms); %d requests, %d failed; by replica: %v",
		fresh, took.Round(time.Millisecond), s.n, s.failed, s.by)
	if s.failed*1000 > s.n {
		t.Fatalf("%d of %d requests failed around the kill (more than 0.1%%); first: %s", s.failed, s.n, s.first)
	}
	if s.n != 5000 {
		t.Fatalf("the load loop sent %d requests, want 5000", s.n)
	}

	evs := parseEvents(t, d.must("events", "--app", "hello", "--output", "json"))
	if !slices.ContainsFunc(evs, func(e types.Event) bool {
		return e.Kind == "fail" && e.Replica == victim && strings.Contains(e.Reason, "signal 9")
	}) {
		t.Fatalf("no fail event naming SIGKILL for %s: %+v", victim, evs)
	}
}

// checkSpread checks that the ready replicas of a (hello: 0.5 of a core at
// most) are pinned each to a CPU of its own, as the kernel sees their
// processes.
func checkSpread(t *testing.T, a types.App) {
	t.Helper()
	seen := map[string]string{}
	for _, r := range a.Replicas {
		if r.State != "ready" {
			continue
		}
		b, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", r.Pid))
		if err != nil {
			t.Fatalf("replica %s: %v", r.ID, err)
		}
		var allowed string
		for _, l := range strings.Split(string(b), "\n") {
			if v, ok := strings.CutPrefix(l, "Cpus_allowed_list:"); ok {
				allowed = strings.TrimSpace(v)
			}
		}
		if r.CPUSet == "" || allowed != r.CPUSet {
			t.Fatalf("replica %s: status says cpuset %q, its process may run on %q", r.ID, r.CPUSet, allowed)
		}
		if o, ok := seen[r.CPUSet]; ok {
			t.Fatalf("replicas %s and %s are both pinned to CPU %s", o, r.ID, r.CPUSet)
		}
		seen[r.CPUSet] = r.ID
	}
}

// webCommandCheck is webPerReplica with a command check: the check runs in
// each replica's container and tests for its own ok.txt, which the test
// removes on the host to make that replica alone unhealthy.
const webCommandCheck = `
name = "web"
image = "busybox:1"
command = ["sh", "-c", "d=/www/$SHOAL_REPLICA; mkdir -p $d; echo $SHOAL_REPLICA > $d/index.html; echo ok > $d/ok.txt; httpd -f -p 8080 -h $d & trap 'kill $!; exit' TERM; wait"]
[scale]
min = 2
max = 2
[health]
command = ["/bin/sh", "-c", "test -f /www/$SHOAL_REPLICA/ok.txt"]
interval = "100ms"
failures = 2
[volumes]
www = "/www"
`

// A replica whose command liveness check starts failing leaves the route,
// is replaced and stopped, and steady traffic through the proxy sees no
// failed request; the fail event carries the command's exit code.
func TestAppCommandCheckFails(t *testing.T) {
	d := startDaemon(t)
	d.checkUnhealthyReplaced(webCommandCheck, func(proxy string) *steady { return healLoad(proxy, "web", 20000) },
		`command "/bin/sh" exited with code 1`)
}

// checkUnhealthyReplaced deploys manifest, two replicas of app web that
// serve /www/<replica> and are healthy while /www/<replica>/ok.txt is
// there, removes one replica's ok.txt under the load that load starts,
// and checks that the replica is replaced without a failed request, that
// its fail event says why, and that the other replica stays in service.
func (d *daemon) checkUnhealthyReplaced(manifest string, load func(proxy string) *steady, why string) {
	t := d.t
	t.Helper()
	d.busybox("busybox:1")
	d.deploy(manifest)
	a := d.waitApp("web", "two ready replicas", func(a types.App) bool { return a.Ready == 2 })
	victim, other := a.Replicas[0].ID, a.Replicas[1].ID
	s := load(d.proxyAddr())
	defer s.end()
	waitFor(t, "both replicas answer", func() bool { return s.answered(victim) > 0 && s.answered(other) > 0 })

	www := filepath.Join(d.dataDir, "apps", "web", "volumes", "www")
	if err := os.Remove(filepath.Join(www, victim, "ok.txt")); err != nil {
		t.Fatal(err)
	}
	a = d.waitApp("web", "the unhealthy replica is replaced", func(a types.App) bool {
		return a.Ready == 2 && a.State == "running" && !slices.ContainsFunc(a.Replicas, func(r types.Replica) bool { return r.ID == victim })
	})
	fresh := others(a, other)[0]
	waitFor(t, "the new replica answers", func() bool { return s.answered(fresh) > 0 })
	s.end()
	if s.failed != 0 {
		t.Fatalf("%d of %d requests failed while a replica was unhealthy; first: %s", s.failed, s.n, s.first)
	}
	t.Logf("%d requests; answers by replica: %v", s.n, s.by)

	evs := parseEvents(t, d.must("events", "--app", "web", "--output", "json"))
	if !slices.ContainsFunc(evs, func(e types.Event) bool {
		return e.Kind == "fail" && e.Replica == victim && strings.Contains(e.Reason, why)
	}) {
		t.Fatalf("no fail event for %s saying %q: %+v", victim, why, evs)
	}
	for _, e := range evs {
		if e.Replica == other && (e.Kind == "fail" || e.Kind == "stop" || e.Kind == "drain") {
			t.Fatalf("the healthy replica %s was taken out of service: %+v", other, e)
		}
	}
}
