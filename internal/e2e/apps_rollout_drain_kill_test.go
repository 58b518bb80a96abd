package e2e

import (
	"net/http"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/shoal-run/shoal/internal/api/types"
	"github.com/shoal-run/shoal/internal/route"
)

// drainManifest is revManifest of cpuburn (whose ?ms=N request holds a
// replica for N ms of CPU time; 0 by default, so the load loop stays cheap)
// with a drain_timeout longer than the slow request can take however
// busy the host (its CPU time takes ten times as long on a host that
// gives the replica a tenth of a core), so a replica left behind by a
// rollout drains its slow request before it freezes.
func drainManifest(replicas int, greeting string) string {
	m := revManifest(replicas, greeting, "[resources]\ncpu = 1")
	m = strings.Replace(m, `image = "hello:1"`, `image = "cpuburn:1"`, 1)
	m = strings.Replace(m, `idle_timeout = "10m"`, "idle_timeout = \"10m\"\ndrain_timeout = \"10m\"", 1)
	return m + "BURN_MS = \"0\"\n"
}

// slowWithin bounds the slow request: 6 s of CPU time, on a busy host.
const slowWithin = 5 * time.Minute

// Under a steady load, with a slow request in flight to a replica of
// revision 1, revision 2 rolls out and takes the traffic; while revision
// 1's replica still drains the slow request, the daemon is killed with
// SIGKILL and started again on the same dirs. No request fails, the slow
// one included; revision 1's replicas end frozen (kept for a rollback) or
// stopped and never come back into the route; every container is a
// replica of the app; and a rollback afterwards works.
func TestAppRolloutDrainSurvivesDaemonKill(t *testing.T) {
	d := startDaemon(t)
	d.exampleImage("cpuburn")
	if r, _ := d.deployFile(drainManifest(2, "v1")); r.code != 0 {
		t.Fatalf("deploy revision 1: %d %s", r.code, r.stderr)
	}
	d.waitApp("hello", "two ready", func(a types.App) bool { return len(pids(a, 1, "ready")) == 2 })
	paddr := d.proxyAddr()
	// The slow request goes first, alone: the replica it is in flight on
	// is the only one with a request in flight.
	slow := slowRequestWithin(paddr, "hello", 6000, &http.Client{Timeout: slowWithin, Transport: client.Transport})
	var slowOn string
	waitFor(t, "the slow request reaches a replica", func() bool {
		for _, r := range d.appFast("hello").Replicas {
			if r.Revision == 1 && r.InFlight > 0 {
				slowOn = r.ID
				return true
			}
		}
		select {
		case st := <-slow:
			t.Fatalf("the slow request ended (%s) before it was seen in flight", st)
		default:
		}
		return false
	})
	s := startSteady(paddr, "hello", "/", 4, 40000, 2*time.Millisecond)
	defer s.end()
	sent := func() int { s.mu.Lock(); defer s.mu.Unlock(); return s.n }
	waitFor(t, "the load loop gets answers", func() bool { return sent() > 50 })

	if r, _ := d.deployFile(drainManifest(2, "v2"), "--detach"); r.code != 0 {
		t.Fatalf("deploy --detach revision 2: exit %d\n%s%s", r.code, r.stdout, r.stderr)
	}
	// Kill once revision 2 takes all the traffic while the replica of
	// revision 1 that has the slow request, out of the route, still
	// drains it.
	var seen types.App
	deadline := time.Now().Add(slowWithin)
	for {
		a := d.appFast("hello")
		draining := slices.ContainsFunc(a.Replicas, func(r types.Replica) bool {
			return r.ID == slowOn && r.State == "ready" && r.InFlight > 0
		})
		if a.Revision == 2 && a.Rollout != nil && a.Rollout.State == types.RolloutDone && draining {
			eps := d.routes()["hello"].Endpoints
			if len(eps) > 0 && !slices.ContainsFunc(eps, func(e route.Endpoint) bool { return e.Revision != 2 }) {
				seen = a
				break
			}
		}
		select {
		case st := <-slow:
			t.Fatalf("the slow request ended (%s) before revision 1 was seen draining; status %s", st, brief(a))
		default:
		}
		if time.Now().After(deadline) {
			t.Fatalf("revision 1 never seen draining behind revision 2; status %+v", a)
		}
		time.Sleep(5 * time.Millisecond)
	}
	d.stop(syscall.SIGKILL)
	atKill := sent()
	t.Logf("killed while revision 1 drains: replicas %s", brief(seen))
	for _, r := range seen.Replicas {
		if r.Revision == 1 && r.InFlight > 0 {
			t.Logf("draining: %s with %d in flight", r.ID, r.InFlight)
		}
	}

	d.start()
	// Until the slow request ends and revision 1 has left service, the
	// route never holds anything but revision 2.
	var slowStatus string
	var a types.App
	deadline = time.Now().Add(slowWithin)
	for {
		for _, e := range d.routes()["hello"].Endpoints {
			if e.Revision != 2 {
				t.Fatalf("after the restart the route holds %s of revision %d; replicas %s", e.ID, e.Revision, brief(d.appFast("hello")))
			}
		}
		if slowStatus == "" {
			select {
			case slowStatus = <-slow:
			default:
			}
		}
		a = d.appFast("hello")
		settled := !slices.ContainsFunc(a.Replicas, func(r types.Replica) bool {
			return r.Revision == 1 && r.State != "frozen" && r.State != "stopped"
		})
		if slowStatus != "" && settled && len(pids(a, 2, "ready")) == 2 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("after the restart: slow request %q, replicas %s", slowStatus, brief(a))
		}
		time.Sleep(10 * time.Millisecond)
	}
	if slowStatus != "200 OK" {
		t.Fatalf("the slow request in flight across the kill: %s", slowStatus)
	}
	t.Logf("after the restart: replicas %s", brief(a))
	atStart := sent()
	waitFor(t, "requests served after the restart", func() bool { return sent() >= atStart+300 })
	a = d.appFast("hello")
	for _, e := range d.routes()["hello"].Endpoints {
		if _, ok := pids(a, 2, "ready")[e.ID]; !ok {
			t.Fatalf("the route holds %s, not a ready replica of revision 2: %s", e.ID, brief(a))
		}
	}
	var want []string
	for _, r := range a.Replicas {
		if r.Revision == 1 && r.State != "frozen" && r.State != "stopped" {
			t.Fatalf("revision 1 back in service: %s", brief(a))
		}
		if r.State != "stopped" && r.State != "failed" {
			want = append(want, r.ID)
		}
	}
	slices.Sort(want)
	// A replica's container goes a moment after its record says so.
	deadline = time.Now().Add(time.Minute)
	for got := d.runcIDs(); !slices.Equal(got, want); got = d.runcIDs() {
		if time.Now().After(deadline) {
			t.Fatalf("containers %v, replicas %v: %s", got, want, brief(a))
		}
		time.Sleep(10 * time.Millisecond)
	}

	r := d.shoal("app", "rollback", "hello")
	if r.code != 0 || !strings.Contains(r.stdout, "revision 1 takes all traffic") {
		t.Fatalf("rollback: exit %d %s %s", r.code, r.stdout, r.stderr)
	}
	a = d.waitApp("hello", "revision 1 ready again", func(a types.App) bool { return a.Revision == 1 && len(pids(a, 1, "ready")) == 2 })
	atRollback := sent()
	waitFor(t, "requests served after the rollback", func() bool { return sent() >= atRollback+200 })
	for _, e := range d.routes()["hello"].Endpoints {
		if e.Revision != 1 {
			t.Fatalf("after the rollback the route holds %s of revision %d", e.ID, e.Revision)
		}
	}
	s.end()
	t.Logf("load loop: %d requests (%d from the kill to the restart's settling), %d failed; after the rollback: %s", s.n, atStart-atKill, s.failed, brief(a))
	if s.failed != 0 {
		t.Fatalf("%d of %d requests failed across the kill mid-drain, the restart and the rollback; first: %s", s.failed, s.n, s.first)
	}
	if got := d.runcIDs(); len(got) > 4 {
		t.Fatalf("containers after the rollback: %v", got)
	}
}
