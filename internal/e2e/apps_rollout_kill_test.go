package e2e

import (
	"encoding/json"
	"fmt"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/shoal-run/shoal/internal/api/types"
)

// runcIDs lists the containers runc knows under the daemon's run dir.
func (d *daemon) runcIDs() []string {
	d.t.Helper()
	out, err := exec.Command("runc", "--root", filepath.Join(d.runDir, "runc"), "list", "-q").CombinedOutput()
	if err != nil {
		d.t.Fatalf("runc list: %v: %s", err, out)
	}
	ids := strings.Fields(string(out))
	slices.Sort(ids)
	return ids
}

// brief names each replica of a with its revision, state and PID.
func brief(a types.App) string {
	var b []string
	for _, r := range a.Replicas {
		b = append(b, fmt.Sprintf("%s r%d %s pid %d", r.ID, r.Revision, r.State, r.Pid))
	}
	return strings.Join(b, ", ")
}

// appFast reads an app's status straight from the API (quicker than the
// CLI, to catch a rollout in its first few hundred milliseconds).
func (d *daemon) appFast(name string) types.App {
	d.t.Helper()
	var a types.App
	body := d.getText("/v1/apps/" + name)
	if err := json.Unmarshal([]byte(body), &a); err != nil {
		d.t.Fatalf("app %s: %v\n%s", name, err, body)
	}
	return a
}

// Under a steady load, the daemon is killed with SIGKILL while a rollout of
// three replicas is in progress (one of them running, not ready yet) and started again on the same dirs: no
// request fails, the rollout completes on the new revision, every container
// is a replica of the app and every live replica has its container, and a
// rollback afterwards still works.
func TestAppRolloutSurvivesDaemonKill(t *testing.T) {
	d := startDaemon(t)
	d.exampleImage("hello")
	if r, _ := d.deployFile(revManifest(3, "v1")); r.code != 0 {
		t.Fatalf("deploy revision 1: %d %s", r.code, r.stderr)
	}
	v1pids := pids(d.waitApp("hello", "three ready", func(a types.App) bool { return len(pids(a, 1, "ready")) == 3 }), 1, "ready")
	proxy := d.proxyAddr()
	s := startSteady(proxy, "hello", "/", 4, 40000, 2*time.Millisecond)
	defer s.end()
	sent := func() int { s.mu.Lock(); defer s.mu.Unlock(); return s.n }
	waitFor(t, "the load loop gets answers", func() bool { return sent() > 50 })

	// Revision 2 is slowboot, which listens only after a second, so the
	// kill lands while its replicas run and are not ready yet.
	d.exampleImage("slowboot")
	v2 := strings.Replace(revManifest(3, "v2"), `image = "hello:1"`, `image = "slowboot:1"`, 1) + "BOOT_DELAY = \"1s\"\n"
	if r, _ := d.deployFile(v2, "--detach"); r.code != 0 {
		t.Fatalf("deploy --detach revision 2: exit %d\n%s%s", r.code, r.stdout, r.stderr)
	}
	// Kill as soon as a replica of revision 2 runs but is not ready yet.
	var seen types.App
	deadline := time.Now().Add(10 * time.Second)
	for {
		a := d.appFast("hello")
		if a.Rollout != nil && a.Rollout.Revision == 2 {
			if a.Rollout.State != types.RolloutProgressing {
				t.Fatalf("the rollout was %s before it was seen in progress: %+v", a.Rollout.State, a.Rollout)
			}
			if slices.ContainsFunc(a.Replicas, func(r types.Replica) bool { return r.Revision == 2 && r.State == "starting" && r.Pid > 0 }) {
				seen = a
				break
			}
		}
		if time.Now().After(deadline) {
			t.Fatalf("revision 2 never seen starting; status %+v", a)
		}
		time.Sleep(2 * time.Millisecond)
	}
	d.stop(syscall.SIGKILL)
	atKill := sent()
	t.Logf("killed mid-rollout: rollout %d/%d ready; replicas %s", seen.Rollout.Ready, seen.Rollout.Want, brief(seen))
	waitFor(t, "requests served while the daemon is down", func() bool { return sent() >= atKill+100 })

	d.start()
	a := d.waitApp("hello", "the rollout done", func(a types.App) bool {
		return a.Revision == 2 && a.Rollout != nil && a.Rollout.State == types.RolloutDone && len(pids(a, 2, "ready")) == 3
	})
	t.Logf("after the restart the rollout ended: %s", a.Rollout.Reason)
	a = d.waitApp("hello", "no replica of revision 1 serving", func(a types.App) bool {
		for _, r := range a.Replicas {
			if r.Revision == 1 && (r.State == "ready" || r.State == "starting" || r.State == "pending" || r.State == "draining") {
				return false
			}
		}
		return true
	})
	t.Logf("replicas after the restart: %s", brief(a))
	atStart := sent()
	waitFor(t, "requests served after the restart", func() bool { return sent() >= atStart+300 })
	for _, e := range d.routes()["hello"].Endpoints {
		if _, ok := pids(a, 2, "ready")[e.ID]; !ok {
			t.Fatalf("the route holds %s, not a ready replica of revision 2: %+v", e.ID, a.Replicas)
		}
	}

	// One container per live replica, and no container without one.
	var want []string
	for _, r := range a.Replicas {
		if r.State != "stopped" && r.State != "failed" {
			want = append(want, r.ID)
		}
	}
	slices.Sort(want)
	if got := d.runcIDs(); !slices.Equal(got, want) {
		t.Fatalf("containers %v, replicas %v: %+v", got, want, a.Replicas)
	}
	for _, r := range a.Replicas {
		if slices.Contains(want, r.ID) && r.Pid == 0 {
			t.Fatalf("replica %s runs but its status has no PID: %s", r.ID, brief(a))
		}
	}
	if n := len(pids(a, 2, "ready")); n != 3 || len(a.Replicas) > 6 {
		t.Fatalf("replicas after the restart: %+v", a.Replicas)
	}

	r := d.shoal("app", "rollback", "hello")
	if r.code != 0 || !strings.Contains(r.stdout, "revision 1 takes all traffic") {
		t.Fatalf("rollback: exit %d %s %s", r.code, r.stdout, r.stderr)
	}
	a = d.waitApp("hello", "revision 1 ready again", func(a types.App) bool { return a.Revision == 1 && len(pids(a, 1, "ready")) == 3 })
	thawed := 0
	for id, pid := range pids(a, 1, "ready") {
		if v1pids[id] == pid {
			thawed++
		}
	}
	atRollback := sent()
	waitFor(t, "requests served after the rollback", func() bool { return sent() >= atRollback+200 })
	s.end()
	t.Logf("load loop: %d requests (%d while the daemon was down or starting), %d failed; %d of revision 1's replicas thawed by the rollback", s.n, atStart-atKill, s.failed, thawed)
	if s.failed != 0 {
		t.Fatalf("%d of %d requests failed across the kill mid-rollout, the restart and the rollback; first: %s", s.failed, s.n, s.first)
	}
	if got := d.runcIDs(); len(got) > 6 {
		t.Fatalf("containers after the rollback: %v", got)
	}
}
