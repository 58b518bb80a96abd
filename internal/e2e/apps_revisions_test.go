package e2e

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/shoal-run/shoal/internal/api/types"
)

// revManifest is hello at a fixed size; greeting makes each revision's
// config its own.
func revManifest(replicas int, greeting string, more ...string) string {
	return fmt.Sprintf(`
name = "hello"
image = "hello:1"
port = 8080
[scale]
min = %d
max = %d
idle_timeout = "10m"
[health]
http = "/healthz"
interval = "200ms"
start_timeout = "5s"
%s
[env]
GREETING = %q
`, replicas, replicas, strings.Join(more, "\n"), greeting)
}

// deployFile writes a manifest and runs `shoal app deploy` on it (which
// waits for the rollout), returning the result and how long it took.
func (d *daemon) deployFile(manifest string, args ...string) (result, time.Duration) {
	d.t.Helper()
	f := filepath.Join(d.t.TempDir(), "shoal.toml")
	if err := os.WriteFile(f, []byte(manifest), 0o644); err != nil {
		d.t.Fatal(err)
	}
	began := time.Now()
	r := d.shoal(append([]string{"app", "deploy", "-f", f}, args...)...)
	return r, time.Since(began)
}

// pids maps the app's replicas of revision rev in state to their PIDs.
func pids(a types.App, rev int, state string) map[string]int {
	out := map[string]int{}
	for _, r := range a.Replicas {
		if r.Revision == rev && r.State == state {
			out[r.ID] = r.Pid
		}
	}
	return out
}

func sameKeys(a, b map[string]int) bool {
	if len(a) != len(b) {
		return false
	}
	for k := range a {
		if _, ok := b[k]; !ok {
			return false
		}
	}
	return true
}

// Under a steady load, a rollout of three replicas: deploy waits for it
// and prints its progress, the new revision's replicas take all traffic,
// the old ones are kept frozen. Then a rollback thaws the old ones (the
// same PIDs) and they take the traffic back. No request fails.
func TestAppRolloutAndRollbackUnderLoad(t *testing.T) {
	d := startDaemon(t)
	d.exampleImage("hello")
	if r, _ := d.deployFile(revManifest(3, "v1")); r.code != 0 {
		t.Fatalf("deploy revision 1: %d %s", r.code, r.stderr)
	}
	v1 := d.waitApp("hello", "three ready", func(a types.App) bool { return len(pids(a, 1, "ready")) == 3 })
	v1pids := pids(v1, 1, "ready")
	proxy := d.proxyAddr()
	s := startSteady(proxy, "hello", "/", 4, 40000, 2*time.Millisecond)
	defer s.end()
	waitFor(t, "the load loop gets answers", func() bool { s.mu.Lock(); defer s.mu.Unlock(); return s.n > 50 })

	r, took := d.deployFile(revManifest(3, "v2"))
	if r.code != 0 || !strings.Contains(r.stdout, "revision 2: rolled out") {
		t.Fatalf("deploy revision 2: exit %d\n%s%s", r.code, r.stdout, r.stderr)
	}
	t.Logf("rollout of 3 replicas under load: `shoal app deploy` returned after %s:\n%s", took.Round(time.Millisecond), r.stdout)
	a := d.app("hello")
	if a.Revision != 2 || a.Rollout == nil || a.Rollout.State != types.RolloutDone || len(pids(a, 2, "ready")) != 3 {
		t.Fatalf("after the rollout: revision %d rollout %+v replicas %+v", a.Revision, a.Rollout, a.Replicas)
	}
	t.Logf("rollout as the daemon saw it: %s", a.Rollout.Reason)
	a = d.waitApp("hello", "revision 1 frozen", func(a types.App) bool { return sameKeys(pids(a, 1, "frozen"), v1pids) })
	v2 := pids(a, 2, "ready")
	mark := map[string]int{}
	s.mu.Lock()
	for id, n := range s.by {
		mark[id] = n
	}
	s.mu.Unlock()
	waitFor(t, "revision 2 answers", func() bool {
		for id := range v2 {
			if s.answered(id) > 10 {
				return true
			}
		}
		return false
	})
	for id := range v1pids {
		if s.answered(id) != mark[id] {
			t.Fatalf("frozen replica %s of revision 1 answered after the rollout", id)
		}
	}

	began := time.Now()
	r = d.shoal("app", "rollback", "hello")
	took = time.Since(began)
	if r.code != 0 || !strings.Contains(r.stdout, "revision 1 takes all traffic") {
		t.Fatalf("rollback: exit %d %s %s", r.code, r.stdout, r.stderr)
	}
	// The first answer of a thawed replica, as the load loop sees it.
	var first time.Duration
	waitFor(t, "revision 1 answers again", func() bool {
		for id := range v1pids {
			if s.answered(id) > mark[id] {
				first = time.Since(began)
				return true
			}
		}
		return false
	})
	t.Logf("rollback: `shoal app rollback` returned after %s; a thawed replica answered the load loop within %s", took.Round(time.Millisecond), first.Round(time.Millisecond))
	a = d.app("hello")
	if got := pids(a, 1, "ready"); len(got) != 3 {
		t.Fatalf("after the rollback: revision 1 ready %v; replicas %+v", got, a.Replicas)
	}
	for id, pid := range pids(a, 1, "ready") {
		if v1pids[id] != pid {
			t.Fatalf("replica %s has PID %d after the rollback, %d before: not thawed", id, pid, v1pids[id])
		}
	}
	d.waitApp("hello", "revision 2 frozen", func(a types.App) bool { return sameKeys(pids(a, 2, "frozen"), v2) })
	time.Sleep(200 * time.Millisecond)
	s.end()
	t.Logf("load loop: %d requests, %d failed", s.n, s.failed)
	if s.failed != 0 {
		t.Fatalf("%d of %d requests failed during the rollout and rollback; first: %s", s.failed, s.n, s.first)
	}
	evs := d.must("events", "--app", "hello")
	for _, want := range []string{"revision 2 rolled out", "revision 2 rolled back to revision 1 by request"} {
		if !strings.Contains(evs, want) {
			t.Fatalf("events lack %q:\n%s", want, evs)
		}
	}
}

// Under a steady load, a revision whose replicas crash at boot is rolled
// back automatically: deploy exits 1 with the reason, the app stays on the
// old revision with the same replicas, and no request fails.
func TestAppAutoRollbackUnderLoad(t *testing.T) {
	d := startDaemon(t)
	d.exampleImage("hello")
	if r, _ := d.deployFile(revManifest(2, "v1")); r.code != 0 {
		t.Fatalf("deploy revision 1: %d %s", r.code, r.stderr)
	}
	v1 := pids(d.waitApp("hello", "two ready", func(a types.App) bool { return len(pids(a, 1, "ready")) == 2 }), 1, "ready")
	proxy := d.proxyAddr()
	s := startSteady(proxy, "hello", "/", 4, 40000, 2*time.Millisecond)
	defer s.end()
	// One process is not enough for the Go runtime's threads: the new
	// revision's replicas crash as they boot.
	r, took := d.deployFile(revManifest(2, "v2", "[resources]\npids = 1"))
	if r.code != 1 || !strings.Contains(r.stderr, "revision 2 rolled back to revision 1") {
		t.Fatalf("deploy of a revision that cannot start: exit %d\n%s%s", r.code, r.stdout, r.stderr)
	}
	t.Logf("automatic rollback: deploy returned after %s: %s", took.Round(time.Millisecond), strings.TrimSpace(r.stderr))
	a := d.app("hello")
	if a.Revision != 1 || a.Rollout.State != types.RolloutRolledBack {
		t.Fatalf("after the automatic rollback: revision %d rollout %+v", a.Revision, a.Rollout)
	}
	for id, pid := range pids(a, 1, "ready") {
		if v1[id] != pid {
			t.Fatalf("revision 1 replicas after the rollback: %v, before %v", pids(a, 1, "ready"), v1)
		}
	}
	time.Sleep(200 * time.Millisecond)
	s.end()
	t.Logf("load loop: %d requests, %d failed", s.n, s.failed)
	if s.failed != 0 {
		t.Fatalf("%d of %d requests failed; first: %s", s.failed, s.n, s.first)
	}
	if evs := d.must("events", "--app", "hello"); !strings.Contains(evs, "rollback") || !strings.Contains(evs, "failed before it was ready") {
		t.Fatalf("events lack the rollback and its reason:\n%s", evs)
	}
}
