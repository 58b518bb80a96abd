package e2e

import (
	"encoding/json"
	"strings"
	"testing"

	"github.com/shoal-run/shoal/internal/api/types"
)

// While a new revision's replicas crash at boot and the old revision
// serves, the app is running and its rollout carries the failures, in the
// status and in `shoal app ls`; `--output json` of ls is the API's list.
func TestAppRolloutFailuresShown(t *testing.T) {
	d := startDaemon(t)
	d.exampleImage("hello")
	if r, _ := d.deployFile(revManifest(2, "v1")); r.code != 0 {
		t.Fatalf("deploy revision 1: %d %s", r.code, r.stderr)
	}
	d.waitApp("hello", "two ready", func(a types.App) bool { return len(pids(a, 1, "ready")) == 2 })
	// failures = 100 keeps the rollout going (no automatic rollback);
	// one process is not enough for the Go runtime: each replica crashes.
	if r, _ := d.deployFile(revManifest(2, "v2", "failures = 100", "[resources]\npids = 1"), "--detach"); r.code != 0 {
		t.Fatalf("deploy revision 2 --detach: %d %s", r.code, r.stderr)
	}
	a := d.waitApp("hello", "a replica of revision 2 fails", func(a types.App) bool {
		return a.Rollout != nil && a.Rollout.Revision == 2 && a.Rollout.Failures >= 2
	})
	if a.State != "running" || a.Rollout.State != types.RolloutProgressing || a.Rollout.Reason == "" || len(pids(a, 1, "ready")) != 2 {
		t.Fatalf("app while revision 2 fails to start: state %q, rollout %+v, replicas %+v", a.State, a.Rollout, a.Replicas)
	}
	if code, _, _ := get(t, d.proxyAddr(), "hello", "/"); code != 200 {
		t.Fatalf("revision 1 answers %d while revision 2 fails", code)
	}
	out := d.must("app", "ls")
	lines := strings.Split(strings.TrimSpace(out), "\n")
	if len(lines) != 2 || !strings.Contains(lines[0], "ROLLOUT") || !strings.Contains(lines[1], "1→2 0/2 ") ||
		!strings.Contains(lines[1], " failed ") || !strings.Contains(lines[1], " running ") {
		t.Fatalf("app ls while revision 2 fails:\n%s", out)
	}
	t.Logf("app ls while revision 2 fails:\n%s", out)
	var apps []types.App
	if err := json.Unmarshal([]byte(d.must("app", "ls", "--output", "json")), &apps); err != nil {
		t.Fatalf("app ls --output json: %v", err)
	}
	if len(apps) != 1 || apps[0].Rollout == nil || apps[0].Rollout.Failures < 2 || apps[0].State != "running" {
		t.Fatalf("app ls --output json: %+v", apps)
	}
	d.must("app", "rollback", "hello", "--to", "1")
	out = d.must("app", "ls")
	if !strings.Contains(out, " done ") {
		t.Fatalf("app ls after the rollback:\n%s", out)
	}
}
