package e2e

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/shoal-run/shoal/internal/api/types"
)

// jobJSON decodes a job printed with --output json.
func jobJSON(t *testing.T, out string) types.Job {
	t.Helper()
	var j types.Job
	if err := json.Unmarshal([]byte(out), &j); err != nil {
		t.Fatalf("job JSON: %v\n%s", err, out)
	}
	return j
}

// post sends a raw request to the daemon's API and returns the status and
// the decoded error body.
func (d *daemon) post(path string, body []byte) (int, types.Error, []byte) {
	d.t.Helper()
	hc := &http.Client{Transport: &http.Transport{DialContext: func(ctx context.Context, _, _ string) (net.Conn, error) {
		return (&net.Dialer{}).DialContext(ctx, "unix", d.sock)
	}}}
	resp, err := hc.Post("http://shoal"+path, "application/json", bytes.NewReader(body))
	if err != nil {
		d.t.Fatalf("POST %s: %v", path, err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	var e types.Error
	json.Unmarshal(b, &e)
	return resp.StatusCode, e, b
}

func TestJobRunCLI(t *testing.T) {
	d := startDaemon(t)
	d.busybox("busybox:1")
	if out := d.must("job", "run", "busybox:1", "echo", "hello"); out != "hello\n" {
		t.Fatalf("job run: %q", out)
	}
	dir := t.TempDir()
	os.WriteFile(filepath.Join(dir, "main.sh"), []byte("read line; echo \"$line from stdin\"; cat input.txt\n"), 0o644)
	os.WriteFile(filepath.Join(dir, "input.txt"), []byte("from a file\n"), 0o644)
	r := d.shoalIn([]byte("hi\n"), "job", "run", "--output", "json", "--file", "main.sh="+filepath.Join(dir, "main.sh"),
		"--file", "input.txt="+filepath.Join(dir, "input.txt"), "--stdin", "-", "busybox:1", "sh", "main.sh")
	if r.code != 0 {
		t.Fatalf("job run: %d %s %s", r.code, r.stdout, r.stderr)
	}
	j := jobJSON(t, r.stdout)
	if j.State != types.JobDone || !j.OK || j.Steps[0].Stdout != "hi from stdin\nfrom a file\n" {
		t.Fatalf("job: %+v", j)
	}
	s := j.Steps[0]
	// Teardown comes after the answer: it is timed in the metrics.
	if s.StartMs <= 0 || s.ExecMs <= 0 {
		t.Fatalf("timings missing: %+v", s)
	}
	// The step's exit code is the command's, and a limit names itself.
	if r := d.shoal("job", "run", "busybox:1", "sh", "-c", "exit 7"); r.code != 7 {
		t.Fatalf("exit 7: code %d", r.code)
	}
	r = d.shoal("job", "run", "--timeout", "300ms", "busybox:1", "sleep", "10")
	if r.code != 1 || !strings.Contains(r.stderr, "timeout") {
		t.Fatalf("timeout: code %d stderr %q", r.code, r.stderr)
	}
	// submit, get --wait, ls, cancel.
	id := strings.TrimSpace(d.must("job", "submit", "--tenant", "course-a", "busybox:1", "echo", "queued"))
	j = jobJSON(t, d.must("job", "get", "--wait", "-o", "json", id))
	if j.State != types.JobDone || j.Steps[0].Stdout != "queued\n" || j.Tenant != "course-a" {
		t.Fatalf("submitted job: %+v", j)
	}
	if out := d.must("job", "ls", "--tenant", "course-a"); !strings.Contains(out, id) {
		t.Fatalf("job ls:\n%s", out)
	}
	id = strings.TrimSpace(d.must("job", "submit", "busybox:1", "sleep", "30"))
	if out := d.must("job", "cancel", id); !strings.Contains(out, "cancelled") {
		t.Fatalf("cancel: %q", out)
	}
	if r := d.shoal("job", "cancel", id); r.code == 0 {
		t.Fatal("cancelling a finished job succeeded")
	}
	if r := d.shoal("job", "get", "jnosuchjob"); r.code != 1 || !strings.Contains(r.stderr, "not found") {
		t.Fatalf("get unknown: %d %q", r.code, r.stderr)
	}
	metrics := d.getText("/metrics")
	for _, want := range []string{`shoal_job_steps_total{status="ok"}`, `shoal_job_steps_total{status="timeout"} 1`, "shoal_job_slots ", `shoal_job_step_phase_seconds_count{phase="start"}`, `shoal_job_step_phase_seconds_count{phase="teardown"}`,
		"shoal_netns_created_total ", "shoal_netns_dirty_total ", "shoal_netns_destroyed_total ",
		"shoal_job_warm_hits_total ", "shoal_job_warm_misses_total ", "shoal_job_warm_ready "} {
		if !strings.Contains(metrics, want) {
			t.Errorf("metrics lack %s", want)
		}
	}
	// The first job of a shape finds no warm sandbox.
	if strings.Contains(metrics, "shoal_job_warm_misses_total 0\n") {
		t.Error("no warm sandbox miss counted")
	}
	// The steps above leave nothing in their namespaces: those go back to
	// the pool once their containers are removed, after the answers.
	for deadline := time.Now().Add(10 * time.Second); strings.Contains(metrics, "shoal_netns_reused_total 0\n"); {
		if time.Now().After(deadline) {
			t.Fatalf("no namespace reused:\n%s", metrics)
		}
		time.Sleep(50 * time.Millisecond)
		metrics = d.getText("/metrics")
	}
	if !strings.Contains(metrics, "shoal_netns_reused_total ") {
		t.Error("metrics lack shoal_netns_reused_total")
	}
}

// getText GETs a path of the daemon's API and returns the body.
func (d *daemon) getText(path string) string {
	d.t.Helper()
	hc := &http.Client{Transport: &http.Transport{DialContext: func(ctx context.Context, _, _ string) (net.Conn, error) {
		return (&net.Dialer{}).DialContext(ctx, "unix", d.sock)
	}}}
	resp, err := hc.Get("http://shoal" + path)
	if err != nil {
		d.t.Fatalf("GET %s: %v", path, err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return string(b)
}

// TestJobBadSubmissions: each bad request is refused with 4xx naming the
// field, and nothing is queued.
func TestJobBadSubmissions(t *testing.T) {
	d := startDaemon(t)
	d.busybox("busybox:1")
	step := `"steps":[{"args":["true"]}]`
	cases := []struct {
		name, body, field string
		code              int
	}{
		{"unknown image", `{"image":"nope:1",` + step + `}`, "image", 400},
		{"no image", `{` + step + `}`, "image", 400},
		{"no steps", `{"image":"busybox:1"}`, "steps", 400},
		{"empty command", `{"image":"busybox:1","steps":[{"args":[]}]}`, "steps[0].args", 400},
		{"negative pids", `{"image":"busybox:1","limits":{"pids":-1},` + step + `}`, "limits.pids", 400},
		{"negative memory", `{"image":"busybox:1","steps":[{"args":["true"],"limits":{"memory":"-5Mi"}}]}`, "steps[0].limits.memory", 400},
		{"negative cpus", `{"image":"busybox:1","limits":{"cpus":-1},` + step + `}`, "limits.cpus", 400},
		{"bad timeout", `{"image":"busybox:1","limits":{"timeout":"-1s"},` + step + `}`, "limits.timeout", 400},
		{"path escape", `{"image":"busybox:1","files":{"../evil":"eA=="},` + step + `}`, `files["../evil"]`, 400},
		{"absolute path", `{"image":"busybox:1","files":{"/etc/passwd":"eA=="},` + step + `}`, `files["/etc/passwd"]`, 400},
		{"dot-dot inside", `{"image":"busybox:1","files":{"a/../../b":"eA=="},` + step + `}`, `files["a/../../b"]`, 400},
		{"bad base64", `{"image":"busybox:1","files":{"a":"!!"},` + step + `}`, "body", 400},
		{"unknown field", `{"image":"busybox:1","gpu":true,` + step + `}`, "gpu", 400},
		{"bad tenant", `{"image":"busybox:1","tenant":"a/b",` + step + `}`, "tenant", 400},
		{"bad callback", `{"image":"busybox:1","callback":"file:///etc/passwd",` + step + `}`, "callback", 400},
		{"bad batch member", `[{"image":"busybox:1",` + step + `},{"image":"busybox:1","steps":[{"args":["true"],"if":"maybe"}]}]`, "jobs[1].steps[0].if", 400},
	}
	big := bytes.Repeat([]byte("x"), 17<<20)
	bigB64, _ := json.Marshal(big)
	cases = append(cases, struct {
		name, body, field string
		code              int
	}{"oversized files", `{"image":"busybox:1","files":{"big.bin":` + string(bigB64) + `},` + step + `}`, `files["big.bin"]`, 400})
	for _, c := range cases {
		code, e, raw := d.post("/v1/jobs", []byte(c.body))
		if code != c.code || e.Field != c.field {
			t.Errorf("%s: %d field %q (%s), want %d naming %q", c.name, code, e.Field, bytes.TrimSpace(raw), c.code, c.field)
		}
	}
	huge := append([]byte(`{"image":"busybox:1","files":{"a":"`), bytes.Repeat([]byte("A"), types.MaxJobBody)...)
	if code, e, _ := d.post("/v1/jobs", huge); code != 413 || e.Field != "body" {
		t.Errorf("huge body: %d %q, want 413 naming body", code, e.Field)
	}
	if out := d.must("job", "ls", "-o", "json"); strings.TrimSpace(out) != "[]" {
		t.Fatalf("refused submissions left jobs:\n%s", out)
	}
	r := d.shoal("job", "run", "--pids", "-3", "busybox:1", "true")
	if r.code != 2 || !strings.Contains(r.stderr, "limits.pids") {
		t.Fatalf("CLI negative pids: %d %q", r.code, r.stderr)
	}
	r = d.shoal("job", "run", "--file", "../x="+os.Args[0], "busybox:1", "true")
	if r.code != 2 || !strings.Contains(r.stderr, `files["../x"]`) {
		t.Fatalf("CLI path escape: %d %q", r.code, r.stderr)
	}
}

// TestJobFairShareUnderBacklog queues a backlog of two tenants weighted 2:1
// on one slot and checks the order in which their jobs completed.
func TestJobFairShareUnderBacklog(t *testing.T) {
	t.Setenv("SHOAL_JOB_SLOTS", "1")
	t.Setenv("SHOAL_JOB_TENANTS", "heavy=2,light=1")
	d := startDaemon(t)
	d.busybox("busybox:1")
	var reqs []types.JobRequest
	for _, tenant := range []string{"heavy", "light"} {
		for i := 0; i < 15; i++ {
			reqs = append(reqs, types.JobRequest{Image: "busybox:1", Tenant: tenant, Steps: []types.JobStep{{Args: []string{"true"}}}})
		}
	}
	body, _ := json.Marshal(reqs)
	code, _, raw := d.post("/v1/jobs?wait=true", body)
	if code != 200 {
		t.Fatalf("batch: %d %s", code, raw)
	}
	var jobs []types.Job
	if err := json.Unmarshal(raw, &jobs); err != nil {
		t.Fatal(err)
	}
	sort.Slice(jobs, func(a, b int) bool { return jobs[a].Finished.Before(*jobs[b].Finished) })
	count := map[string]int{}
	for i, j := range jobs[:18] {
		if j.State != types.JobDone || !j.OK {
			t.Fatalf("job %d: %+v", i, j)
		}
		count[j.Tenant]++
	}
	if count["heavy"] != 12 || count["light"] != 6 {
		t.Fatalf("first 18 jobs completed: %v, want heavy:12 light:6 for weights 2:1", count)
	}
}

// TestJobRestartLosesNoJob kills the daemon (SIGKILL) while a job runs and
// others wait, then stops it gracefully with jobs queued: every job ends
// done, the interrupted one in its second attempt.
func TestJobRestartLosesNoJob(t *testing.T) {
	t.Setenv("SHOAL_JOB_SLOTS", "1")
	d := startDaemon(t)
	d.busybox("busybox:1")
	var ids []string
	for i := 0; i < 4; i++ {
		// The first job waits long enough to be running at the kill.
		script := "sleep 0.5; echo done"
		if i == 0 {
			script = "for i in 1 2 3 4 5 6 7 8 9 10; do sleep 0.2; done; echo slow"
		}
		ids = append(ids, strings.TrimSpace(d.must("job", "submit", "busybox:1", "sh", "-c", script)))
	}
	d.waitRunning(ids[0])
	killed := time.Now()
	d.stop(syscall.SIGKILL)
	d.start()
	// A graceful stop with jobs still queued or running.
	d.stop(syscall.SIGTERM)
	d.start()
	for i, id := range ids {
		j := jobJSON(t, d.must("job", "get", "--wait", "-o", "json", id))
		if j.State != types.JobDone || !j.OK {
			t.Fatalf("job %d after restarts: %+v", i, j)
		}
		// Its start is stored a moment after it starts: the attempt killed
		// is counted if that was before the kill.
		if i == 0 && (j.Attempts < 1 || j.Attempts > 2 || j.Started == nil || !j.Started.After(killed) || j.Steps[0].Stdout != "slow\n") {
			t.Fatalf("interrupted job: attempts %d, started %v (killed at %v), stdout %q, want a complete attempt after the kill", j.Attempts, j.Started, killed, j.Steps[0].Stdout)
		}
	}
	// Nothing of the sandboxes is left once the last one's teardown, which
	// follows its answer, is done.
	var out string
	var left []os.DirEntry
	for i := 0; i < 500; i++ {
		out = d.must("ps", "-a", "-o", "json")
		left, _ = os.ReadDir(filepath.Join(d.dataDir, "jobs"))
		if strings.TrimSpace(out) == "[]" && len(left) == 0 {
			break
		}
		time.Sleep(10 * time.Millisecond)
	}
	if strings.TrimSpace(out) != "[]" || len(left) != 0 {
		t.Fatalf("containers left:\n%s\nwork directories left: %v", out, left)
	}

}

// waitRunning waits until job id runs; it fails the test if the job ends
// first or does not start within 30s.
func (d *daemon) waitRunning(id string) {
	d.t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for {
		j := jobJSON(d.t, d.must("job", "get", "-o", "json", id))
		switch {
		case j.State == types.JobRunning:
			return
		case j.State != types.JobQueued:
			d.t.Fatalf("job %s %s before it was seen running", id, j.State)
		case time.Now().After(deadline):
			d.t.Fatalf("job %s still queued after 30s", id)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// TestJobUserNamespace: where the path to the data dir is searchable, job
// sandboxes run as root in a user namespace that is host uid 100000; where
// it is not (the harness's 0700 temp dirs), they run as nobody and
// `shoal info` says why.
func TestJobUserNamespace(t *testing.T) {
	d := startDaemon(t)
	if out := d.must("info"); !strings.Contains(out, "without a user namespace") || !strings.Contains(out, "not searchable") {
		t.Fatalf("info does not say why sandboxes run without a user namespace:\n%s", out)
	}
	d.busybox("busybox:1")
	if out := d.must("job", "run", "busybox:1", "id", "-u"); out != "65534\n" {
		t.Fatalf("sandbox uid without a user namespace: %q", out)
	}
	d.sandboxUserNS()
	out := d.must("job", "run", "busybox:1", "sh", "-c", "id -u; cat /proc/self/uid_map; echo x > /work/f && echo wrote; if touch /bin/y; then echo IMAGE; fi")
	if want := "0\n         0     100000      65536\nwrote\n"; out != want {
		t.Fatalf("sandbox in a user namespace printed %q, want %q", out, want)
	}
	// Another tenant's sandbox maps root to host ids of its own.
	if out := d.must("job", "run", "--tenant", "other", "busybox:1", "cat", "/proc/self/uid_map"); out != "         0     165536      65536\n" {
		t.Fatalf("another tenant's uid map: %q, want root at host uid 165536", out)
	}
	// Seen from the host, the sandbox's processes belong to uid 100000.
	id := strings.TrimSpace(d.must("job", "submit", "busybox:1", "sleep", "5"))
	// Its sandbox may be one created ahead (named for itself, not the job):
	// the sleep is looked for in every sandbox's cgroup.
	procs := filepath.Join("/sys/fs/cgroup/pids", d.cgroup+"-jobs", "*", "cgroup.procs")
	var status string
	for i := 0; i < 1000 && status == ""; i++ {
		var b []byte
		files, _ := filepath.Glob(procs)
		for _, f := range files {
			more, _ := os.ReadFile(f)
			b = append(append(b, more...), '\n')
		}
		for _, pid := range strings.Fields(string(b)) {
			if st, err := os.ReadFile("/proc/" + pid + "/status"); err == nil && strings.HasPrefix(string(st), "Name:\tsleep\n") {
				status = string(st)
			}
		}
		if status == "" {
			time.Sleep(10 * time.Millisecond)
		}
	}
	if !strings.Contains(status, "\nUid:\t100000\t100000\t100000\t100000\n") {
		t.Fatalf("the sandbox's sleep in %s, seen from the host:\n%s", procs, status)
	}
	d.must("job", "cancel", id)
}

// TestJobKilledDaemonLeavesNoStep: a daemon killed while a job's first
// step runs in a reusable sandbox leaves that step running no longer than
// it takes the sandbox's process to see the daemon's end of its socket
// close, not until the daemon comes back.
func TestJobKilledDaemonLeavesNoStep(t *testing.T) {
	t.Setenv("SHOAL_JOB_SLOTS", "1")
	d := startDaemon(t)
	d.busybox("busybox:1")
	for i := 0; counter(t, d.getText("/metrics"), "shoal_job_warm_reused_total") < 1; i++ {
		if i == 30 {
			t.Fatal("no job ran in a reused sandbox")
		}
		d.must("job", "run", "busybox:1", "true")
	}
	marker := fmt.Sprintf("marker-%d", os.Getpid())
	id := strings.TrimSpace(d.must("job", "submit", "busybox:1", "sh", "-c", "sleep 1000; echo "+marker))
	d.waitRunning(id)
	// Running from when it took its slot: its command runs a little later
	// (once its sandbox is taken and its step's limits written).
	for i := 0; !running(marker); i++ {
		if i == 2000 {
			t.Fatalf("no process of the job (%s) on the host 20s after it was running", marker)
		}
		time.Sleep(10 * time.Millisecond)
	}
	d.stop(syscall.SIGKILL)
	for i := 0; running(marker); i++ {
		if i == 2000 {
			t.Fatalf("the job's step still runs 20s after its daemon was killed")
		}
		time.Sleep(10 * time.Millisecond)
	}
	d.start()
}

// running reports whether a process on the host has marker in its
// command line.
func running(marker string) bool {
	dirs, _ := os.ReadDir("/proc")
	for _, e := range dirs {
		if b, err := os.ReadFile(filepath.Join("/proc", e.Name(), "cmdline")); err == nil && strings.Contains(string(b), marker) {
			return true
		}
	}
	return false
}
