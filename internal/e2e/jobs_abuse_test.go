package e2e

import (
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/shoal-run/shoal/internal/api/types"
)

// TestJobForkBombLeavesDaemonHealthy runs a fork bomb through the daemon
// with the default process limit: the step ends at its time limit, the
// daemon stays healthy, the next job runs, and no process or cgroup of the
// bomb is left.
func TestJobForkBombLeavesDaemonHealthy(t *testing.T) {
	d := startDaemon(t)
	d.busybox("busybox:1")
	r := d.shoal("job", "run", "--output", "json", "--timeout", "3s", "busybox:1", "sh", "-c", "(f(){ f | f & }; f) & while :; do :; done")
	j := jobJSON(t, r.stdout)
	if r.code != 1 || j.State != types.JobDone || len(j.Steps) != 1 || j.Steps[0].Status != types.StepTimeout {
		t.Fatalf("fork bomb: exit %d, job %+v; want exit 1 and status timeout", r.code, j)
	}
	if !strings.Contains(j.Steps[0].Stderr, "fork") {
		t.Errorf("stderr %q: want the shell's fork failures at the process limit", j.Steps[0].Stderr)
	}
	var h types.Health
	if err := json.Unmarshal([]byte(d.getText("/v1/health")), &h); err != nil || h.Status != "ok" {
		t.Fatalf("health after the bomb: %+v %v", h, err)
	}
	d.must("info")
	if out := d.must("job", "run", "busybox:1", "echo", "hello"); out != "hello\n" {
		t.Fatalf("job after the bomb: %q", out)
	}
	// The sandboxes' teardown follows their answer: wait for it, bounded.
	var left []string
	for i := 0; i < 1000; i++ {
		left = append(cgroupChildren(d.cgroup), cgroupChildren(d.cgroup+"-jobs")...)
		work, _ := os.ReadDir(filepath.Join(d.dataDir, "jobs"))
		for _, w := range work {
			left = append(left, filepath.Join(d.dataDir, "jobs", w.Name()))
		}
		if len(left) == 0 {
			break
		}
		time.Sleep(10 * time.Millisecond)
	}
	if len(left) != 0 {
		t.Fatalf("left after the jobs: %q", left)
	}
}

// cgroupChildren lists the cgroups under parent in every hierarchy.
func cgroupChildren(parent string) []string {
	var out []string
	for _, pat := range []string{"/sys/fs/cgroup/*" + parent + "/*", "/sys/fs/cgroup" + parent + "/*"} {
		ms, _ := filepath.Glob(pat)
		for _, m := range ms {
			if fi, err := os.Stat(m); err == nil && fi.IsDir() {
				out = append(out, m)
			}
		}
	}
	return out
}

// TestJobTenantQuota: a tenant whose queue is full is answered 429 naming
// the tenant, for one job and for a batch, through the API and the CLI;
// nothing of a refused batch is queued, and a freed place can be used.
func TestJobTenantQuota(t *testing.T) {
	t.Setenv("SHOAL_JOB_SLOTS", "1")
	t.Setenv("SHOAL_JOB_TENANTS", "small=1:2")
	d := startDaemon(t)
	d.busybox("busybox:1")
	// One job holds the only slot, so the others stay queued.
	blocker := strings.TrimSpace(d.must("job", "submit", "--tenant", "other", "busybox:1", "sleep", "60"))
	d.waitRunning(blocker)
	// Its sandbox's cgroup shows that cgroupChildren finds them: a job is
	// running from the moment its sandbox begins to start.
	for i := 0; len(cgroupChildren(d.cgroup))+len(cgroupChildren(d.cgroup+"-jobs")) == 0; i++ {
		if i == 1000 {
			t.Fatalf("no cgroup of the running job found under %s", d.cgroup)
		}
		time.Sleep(10 * time.Millisecond)
	}
	one := `{"image":"busybox:1","tenant":"small","steps":[{"args":["true"]}]}`
	var queued []string
	for i := 0; i < 2; i++ {
		code, _, raw := d.post("/v1/jobs", []byte(one))
		var j types.Job
		if code != 202 || json.Unmarshal(raw, &j) != nil {
			t.Fatalf("job %d of a queue of 2: %d %s", i, code, raw)
		}
		queued = append(queued, j.ID)
	}
	if code, e, raw := d.post("/v1/jobs", []byte(one)); code != 429 || e.Field != "tenant" || !strings.Contains(e.Error, `tenant "small"`) {
		t.Fatalf("third job of a queue of 2: %d %s, want 429 naming the tenant", code, raw)
	}
	if code, e, raw := d.post("/v1/jobs", []byte("["+one+"]")); code != 429 || e.Field != "tenant" {
		t.Fatalf("batch over the quota: %d %s, want 429 naming the tenant", code, raw)
	}
	// Other tenants are not held back by it.
	other := strings.TrimSpace(d.must("job", "submit", "--tenant", "other", "busybox:1", "true"))

	// The CLI: a refusal is an error on stderr, not an id.
	if r := d.shoal("job", "submit", "--tenant", "small", "busybox:1", "true"); r.code != 1 || r.stdout != "" || !strings.Contains(r.stderr, "quota") {
		t.Fatalf("CLI submit over the quota: exit %d %q %q", r.code, r.stdout, r.stderr)
	}
	d.must("job", "cancel", queued[0])
	batch := filepath.Join(t.TempDir(), "batch.json")
	os.WriteFile(batch, []byte("["+one+","+one+"]"), 0o644)
	if r := d.shoal("job", "submit", "-f", batch); r.code != 1 || r.stdout != "" || !strings.Contains(r.stderr, "quota") {
		t.Fatalf("CLI batch of 2 with 1 place left: exit %d %q %q", r.code, r.stdout, r.stderr)
	}
	var small []types.Job
	json.Unmarshal([]byte(d.must("job", "ls", "--tenant", "small", "--state", "queued", "-o", "json")), &small)
	if len(small) != 1 || small[0].ID != queued[1] {
		t.Fatalf("queued jobs of small after the refused batch: %+v, want only %s", small, queued[1])
	}
	// The freed place takes a batch of one; the ids are printed one a line.
	os.WriteFile(batch, []byte("["+one+"]"), 0o644)
	ids := strings.Fields(d.must("job", "submit", "-f", batch))
	if len(ids) != 1 {
		t.Fatalf("batch of one: ids %q", ids)
	}
	for _, id := range append(ids, queued[1], other, blocker) {
		d.shoal("job", "cancel", id)
	}
}
