package cli

import (
	"encoding/json"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/shoal-run/shoal/internal/api/types"
)

// deploy waits for the rollout, printing each step of its progress, and
// exits 0 once the revision takes the traffic, 1 with the reason when it
// was rolled back; --detach does not wait.
func TestAppDeployWaits(t *testing.T) {
	host, fa := appDaemon(t)
	f := filepath.Join(t.TempDir(), "shoal.toml")
	os.WriteFile(f, []byte("name = \"hello\"\nimage = \"hello:1\"\n"), 0o644)
	fa.rollouts = []types.Rollout{
		{Revision: 2, From: 1, State: types.RolloutProgressing, Ready: 0, Want: 3},
		{Revision: 2, From: 1, State: types.RolloutProgressing, Ready: 2, Want: 3},
		{Revision: 2, From: 1, State: types.RolloutProgressing, Ready: 2, Want: 3, Failures: 1, Reason: "boom"},
		{Revision: 2, From: 1, State: types.RolloutDone, Ready: 3, Want: 3, Reason: "3/3 ready after 812ms"},
	}
	code, out, errs := shoal(t, host, "app", "deploy", "-f", f)
	for _, want := range []string{"revision 2: 0/3 ready\n", "revision 2: 2/3 ready\n", "revision 2: 2/3 ready, 1 failed: boom\n", "revision 2: rolled out (3/3 ready after 812ms)", "url: "} {
		if code != 0 || !strings.Contains(out, want) {
			t.Fatalf("deploy: exit %d, output lacks %q:\n%s%s", code, want, out, errs)
		}
	}
	fa.rollouts = []types.Rollout{{Revision: 2, From: 1, State: types.RolloutRolledBack, Reason: "3 replicas of revision 2 failed before it was ready: boom"}}
	code, _, errs = shoal(t, host, "app", "deploy", "-f", f)
	if code != 1 || !strings.Contains(errs, "revision 2 rolled back to revision 1: 3 replicas of revision 2 failed before it was ready: boom") {
		t.Fatalf("deploy of a revision rolled back: exit %d %q", code, errs)
	}
	fa.rollouts = []types.Rollout{{Revision: 2, From: 1, State: types.RolloutProgressing, Want: 3}}
	code, out, errs = shoal(t, host, "app", "deploy", "-f", f, "--detach")
	if code != 0 || strings.Contains(out, "ready") {
		t.Fatalf("deploy --detach: exit %d %q %q", code, out, errs)
	}
}

func TestAppRollbackAndTraffic(t *testing.T) {
	host, fa := appDaemon(t)
	code, out, errs := shoal(t, host, "app", "rollback", "hello", "--to", "1")
	if code != 0 || fa.rollback.To != 1 || !strings.Contains(out, "hello: revision 1 takes all traffic (rolled back from revision 2)") {
		t.Fatalf("rollback: %d %q %q", code, out, errs)
	}
	if code, _, errs := shoal(t, host, "app", "rollback", "hello", "--to", "-1"); code != 2 {
		t.Fatalf("rollback --to -1: %d %q", code, errs)
	}
	code, out, errs = shoal(t, host, "app", "traffic", "hello", "1=90", "2=10", "--sticky")
	want := []types.TrafficTarget{{Revision: 1, Percent: 90}, {Revision: 2, Percent: 10}}
	if code != 0 || !slices.Equal(fa.traffic.Traffic, want) || !fa.traffic.Sticky || !strings.Contains(out, "90%") {
		t.Fatalf("traffic: %d %q %q, sent %+v", code, out, errs, fa.traffic)
	}
	for _, c := range []struct {
		args []string
		want string
	}{
		{[]string{"1=90", "2=20"}, "add up to 110"},
		{[]string{"1=90", "x=10"}, `"x=10"`},
		{[]string{"1=90", "2"}, `"2"`},
		{[]string{"1=50", "1=50"}, "given twice"},
		{[]string{"1=150"}, `"1=150"`},
	} {
		code, _, errs := shoal(t, host, append([]string{"app", "traffic", "hello"}, c.args...)...)
		if code != 2 || !strings.Contains(errs, c.want) {
			t.Errorf("traffic %v: exit %d %q; want 2 naming %q", c.args, code, errs, c.want)
		}
	}
}

// app ls shows the rollout beside the revision: progress and failures
// while it runs, its outcome after; --output json carries it as the API
// does.
func TestAppLsRollout(t *testing.T) {
	host, fa := appDaemon(t)
	for _, c := range []struct {
		ro   *types.Rollout
		want string
	}{
		{nil, " - "},
		{&types.Rollout{Revision: 3, From: 2, State: types.RolloutProgressing, Ready: 1, Want: 3}, " 2→3 1/3 "},
		{&types.Rollout{Revision: 3, From: 2, State: types.RolloutProgressing, Ready: 0, Want: 3, Failures: 2}, " 2→3 0/3 2 failed "},
		{&types.Rollout{Revision: 1, State: types.RolloutProgressing, Ready: 0, Want: 1}, " 1 0/1 "},
		{&types.Rollout{Revision: 3, From: 2, State: types.RolloutDone, Ready: 3, Want: 3}, " done "},
		{&types.Rollout{Revision: 3, From: 2, State: types.RolloutRolledBack}, " 3 rolled back "},
		{&types.Rollout{Revision: 1, State: types.RolloutFailed}, " 1 failed "},
	} {
		fa.app.Rollout = c.ro
		code, out, errs := shoal(t, host, "app", "ls")
		lines := strings.Split(out, "\n")
		if code != 0 || len(lines) < 2 || !strings.Contains(lines[0], " REVISION  ROLLOUT ") || !strings.Contains(lines[1], c.want) {
			t.Errorf("ls with rollout %+v: exit %d, want %q in\n%s%s", c.ro, code, c.want, out, errs)
		}
	}
	fa.app.Rollout = &types.Rollout{Revision: 3, From: 2, State: types.RolloutProgressing, Ready: 0, Want: 3, Failures: 2, Reason: "boom"}
	code, out, errs := shoal(t, host, "app", "ls", "--output", "json")
	var apps []types.App
	if code != 0 || json.Unmarshal([]byte(out), &apps) != nil || len(apps) != 1 || apps[0].Rollout == nil || *apps[0].Rollout != *fa.app.Rollout {
		t.Fatalf("ls --output json: exit %d %s%s", code, out, errs)
	}
	code, out, _ = shoal(t, host, "app", "status", "hello")
	if code != 0 || !strings.Contains(out, "revision 3 progressing (from revision 2), 0/3 ready, 2 failed: boom") {
		t.Fatalf("status of a failing rollout: %d\n%s", code, out)
	}
}
