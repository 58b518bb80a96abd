package cli

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"net/http/httptest"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"

	"github.com/shoal-run/shoal/internal/api"
	"github.com/shoal-run/shoal/internal/api/types"
	"github.com/shoal-run/shoal/internal/errdefs"
)

// fakeJobs stands in for the job service behind the real API handler: it
// keeps what was submitted and answers every job with result's steps.
type fakeJobs struct {
	sent   []types.JobRequest
	result types.Job
	listed []types.Job
}

func (f *fakeJobs) Submit(_ context.Context, reqs []types.JobRequest) ([]types.Job, error) {
	f.sent = reqs
	var js []types.Job
	for i, r := range reqs {
		js = append(js, types.Job{ID: fmt.Sprintf("j%d", i+1), Tenant: r.Tenant, Image: r.Image, State: types.JobQueued})
	}
	return js, nil
}
func (f *fakeJobs) Run(ctx context.Context, req types.JobRequest) (types.Job, error) {
	js, _ := f.Submit(ctx, []types.JobRequest{req})
	return f.Wait(ctx, js[0].ID)
}
func (f *fakeJobs) Get(_ context.Context, id string) (types.Job, error) { return f.Wait(nil, id) }
func (f *fakeJobs) Wait(_ context.Context, id string) (types.Job, error) {
	j := f.result
	j.ID = id
	return j, nil
}
func (f *fakeJobs) List(context.Context, types.JobFilter) ([]types.Job, error) { return f.listed, nil }
func (f *fakeJobs) Cancel(_ context.Context, id string) (types.Job, error) {
	return types.Job{}, fmt.Errorf("job %q: %w", id, errdefs.ErrNotFound)
}

func jobDaemon(t *testing.T) (string, *fakeJobs) {
	fj := &fakeJobs{result: types.Job{State: types.JobDone, OK: true, Steps: []types.StepResult{{Status: types.StepOK, Stdout: "hello\n"}}}}
	ts := httptest.NewServer((&api.Server{Jobs: fj}).Handler(""))
	t.Cleanup(ts.Close)
	return ts.URL, fj
}

func writeFile(t *testing.T, name, content string) string {
	t.Helper()
	p := filepath.Join(t.TempDir(), name)
	if err := os.WriteFile(p, []byte(content), 0o644); err != nil {
		t.Fatal(err)
	}
	return p
}

const twoSteps = `{"image": "busybox:1", "tenant": "course-a", "priority": 1,
 "env": ["A=file", "B=file"], "files": {"main.sh": "ZWNobyBmaWxlCg=="},
 "limits": {"memory": "64Mi", "timeout": "2s", "work_size": "8Mi"},
 "steps": [{"name": "student", "args": ["sh", "main.sh"], "limits": {"timeout": "1s", "pids": 10}},
           {"name": "grader", "if": "success", "args": ["true"]}]}`

// Flags given with -f change the file's jobs as the help says.
func TestJobFromFileFlags(t *testing.T) {
	host, fj := jobDaemon(t)
	file := writeFile(t, "grading.json", twoSteps)
	local := writeFile(t, "main.sh", "echo flag\n")
	code, out, errs := shoal(t, host, "job", "submit", "--tenant", "course-b", "--priority", "5", "--callback", "http://127.0.0.1:9/cb",
		"-e", "B=flag", "-e", "C=flag", "--file", "main.sh="+local, "--file", "extra.txt="+local,
		"--timeout", "5s", "--pids", "20", "--work-size", "16Mi", "-f", file)
	if code != 0 || out != "j1\n" {
		t.Fatalf("submit -f with flags: %d %q %q", code, out, errs)
	}
	if len(fj.sent) != 1 {
		t.Fatalf("sent %d jobs", len(fj.sent))
	}
	r := fj.sent[0]
	if r.Tenant != "course-b" || r.Priority != 5 || r.Callback != "http://127.0.0.1:9/cb" || r.Image != "busybox:1" {
		t.Errorf("job fields: tenant %q priority %d callback %q image %q", r.Tenant, r.Priority, r.Callback, r.Image)
	}
	if want := []string{"A=file", "B=flag", "C=flag"}; !reflect.DeepEqual(r.Env, want) {
		t.Errorf("env %q, want %q", r.Env, want)
	}
	if string(r.Files["main.sh"]) != "echo flag\n" || string(r.Files["extra.txt"]) != "echo flag\n" || len(r.Files) != 2 {
		t.Errorf("files %q", r.Files)
	}
	// Limits set by flags win over the job's and the step's own; the rest
	// of the file's limits stay.
	if want := (types.JobLimits{Memory: "64Mi", Timeout: "5s", Pids: 20, WorkSize: "16Mi"}); r.Limits != want {
		t.Errorf("job limits %+v, want %+v", r.Limits, want)
	}
	if want := (types.JobLimits{Timeout: "5s", Pids: 20}); r.Steps[0].Limits == nil || *r.Steps[0].Limits != want {
		t.Errorf("step 0 limits %+v, want %+v", r.Steps[0].Limits, want)
	}
	if r.Steps[1].Limits != nil || r.Steps[1].If != "success" || r.Steps[0].Name != "student" {
		t.Errorf("steps changed beyond the flags: %+v", r.Steps)
	}

	// Without flags, the file is sent as it is.
	if code, _, errs := shoal(t, host, "job", "submit", "-f", file); code != 0 {
		t.Fatalf("submit -f: %d %q", code, errs)
	}
	var want types.JobRequest
	json.Unmarshal([]byte(twoSteps), &want)
	if !reflect.DeepEqual(fj.sent[0], want) {
		t.Errorf("sent %+v, want the file's %+v", fj.sent[0], want)
	}

	// --stdin goes to the one step of a one-step file.
	one := writeFile(t, "one.json", `{"image": "busybox:1", "steps": [{"args": ["cat"], "stdin": "ZmlsZQ=="}]}`)
	in := writeFile(t, "in.txt", "from the flag")
	if code, _, errs := shoal(t, host, "job", "run", "--stdin", in, "-f", one); code != 0 {
		t.Fatalf("run --stdin -f: %d %q", code, errs)
	}
	if got := string(fj.sent[0].Steps[0].Stdin); got != "from the flag" {
		t.Errorf("stdin %q", got)
	}
}

// Flags that cannot apply to a file, and bad files, are usage errors (2)
// that name the flag or the file; nothing is sent.
func TestJobFromFileRefused(t *testing.T) {
	host, fj := jobDaemon(t)
	file := writeFile(t, "grading.json", twoSteps)
	batch := writeFile(t, "batch.json", `[{"image":"busybox:1","steps":[{"args":["true"]}]}]`)
	for _, c := range []struct {
		args []string
		want string
	}{
		{[]string{"submit", "--stdin", file, "-f", file}, "--stdin: " + file + " has 2 steps"},
		{[]string{"submit", "--stdin", "-", "-f", "-"}, "both read standard input"},
		{[]string{"submit", "-e", "NOVALUE", "-f", file}, `--env "NOVALUE"`},
		{[]string{"submit", "--file", "x", "-f", file}, `--file "x"`},
		{[]string{"submit", "-f", file, "busybox:1", "true"}, "not both"},
		{[]string{"submit", "-f", writeFile(t, "bad.json", `{"image":"b","gpu":true}`)}, `unknown field "gpu"`},
		{[]string{"submit", "-f", writeFile(t, "two.json", `{"image":"b"} {"image":"c"}`)}, "more after the first JSON value"},
		{[]string{"submit", "-f", writeFile(t, "empty.json", `[]`)}, "the batch is empty"},
		{[]string{"submit", "-f", filepath.Join(t.TempDir(), "missing.json")}, "missing.json"},
		{[]string{"run", "-f", batch}, "job submit -f " + batch},
	} {
		fj.sent = nil
		code, _, errs := shoal(t, host, append([]string{"job"}, c.args...)...)
		if code != 2 || !strings.Contains(errs, c.want) {
			t.Errorf("job %q: exit %d %q; want 2 naming %q", c.args, code, errs, c.want)
		}
		if fj.sent != nil {
			t.Errorf("job %q sent %+v", c.args, fj.sent)
		}
	}
}

// A JSON array is queued as a batch: one id a line, the flags on every job.
func TestJobSubmitBatch(t *testing.T) {
	host, fj := jobDaemon(t)
	batch := writeFile(t, "batch.json", `[{"image":"busybox:1","steps":[{"args":["true"]}]},
		{"image":"busybox:1","tenant":"x","steps":[{"args":["false"]},{"args":["true"],"limits":{"memory":"8Mi"}}]}]`)
	code, out, errs := shoal(t, host, "job", "submit", "--tenant", "course-a", "--memory", "32Mi", "-f", batch)
	if code != 0 || out != "j1\nj2\n" {
		t.Fatalf("submit batch: %d %q %q", code, out, errs)
	}
	if len(fj.sent) != 2 || fj.sent[0].Tenant != "course-a" || fj.sent[1].Tenant != "course-a" ||
		fj.sent[1].Limits.Memory != "32Mi" || fj.sent[1].Steps[1].Limits.Memory != "32Mi" {
		t.Fatalf("sent %+v", fj.sent)
	}
	code, out, _ = shoal(t, host, "job", "submit", "-o", "json", "-f", batch)
	var js []types.Job
	if code != 0 || json.Unmarshal([]byte(out), &js) != nil || len(js) != 2 || js[1].ID != "j2" {
		t.Fatalf("submit batch json: %d %q", code, out)
	}
}

// job run exits the same way whether it prints text or JSON.
func TestJobRunExitCode(t *testing.T) {
	host, fj := jobDaemon(t)
	for _, c := range []struct {
		name string
		job  types.Job
		code int
	}{
		{"ok", types.Job{State: types.JobDone, OK: true, Steps: []types.StepResult{{Status: types.StepOK}}}, 0},
		{"exit 3", types.Job{State: types.JobDone, Steps: []types.StepResult{{Status: types.StepNonzeroExit, ExitCode: 3}}}, 3},
		{"exit 3 then a skipped step", types.Job{State: types.JobDone, Steps: []types.StepResult{{Status: types.StepNonzeroExit, ExitCode: 3}, {Status: types.StepSkipped}}}, 3},
		{"timeout", types.Job{State: types.JobDone, Steps: []types.StepResult{{Status: types.StepOK}, {Status: types.StepTimeout, ExitCode: 137}}}, 1},
		{"cancelled", types.Job{State: types.JobCancelled, Steps: []types.StepResult{{Status: types.StepKilled}}}, 1},
		{"failed", types.Job{State: types.JobFailed, Error: "image gone"}, 1},
	} {
		fj.result = c.job
		var codes []int
		for _, out := range []string{"table", "json"} {
			var stdout, stderr bytes.Buffer
			code := Main([]string{"--host", host, "job", "run", "-o", out, "busybox:1", "true"}, &stdout, &stderr)
			codes = append(codes, code)
			if out == "json" {
				var j types.Job
				if err := json.Unmarshal(stdout.Bytes(), &j); err != nil || j.State != c.job.State {
					t.Errorf("%s: json output %q", c.name, stdout.String())
				}
			}
		}
		if codes[0] != c.code || codes[1] != c.code {
			t.Errorf("%s: exit codes text %d json %d, want %d", c.name, codes[0], codes[1], c.code)
		}
	}
	// submit exits 0 once queued, whatever the job does later.
	fj.result = types.Job{State: types.JobDone, Steps: []types.StepResult{{Status: types.StepNonzeroExit, ExitCode: 3}}}
	if code, _, _ := shoal(t, host, "job", "submit", "-o", "json", "busybox:1", "false"); code != 0 {
		t.Errorf("submit -o json: exit %d", code)
	}
}

// Each of job run and job submit shows its own examples.
func TestJobHelpExamples(t *testing.T) {
	for _, c := range []struct{ cmd, other string }{{"run", "submit"}, {"submit", "run"}} {
		var out, errb bytes.Buffer
		if code := Main([]string{"job", c.cmd, "--help"}, &out, &errb); code != 0 {
			t.Fatalf("job %s --help: %d %s", c.cmd, code, errb.String())
		}
		_, ex, _ := strings.Cut(out.String(), "Examples:\n")
		ex, _, _ = strings.Cut(ex, "\n\n")
		if !strings.Contains(ex, "shoal job "+c.cmd+" ") || strings.Contains(ex, "shoal job "+c.other+" ") {
			t.Errorf("job %s --help examples:\n%s", c.cmd, ex)
		}
	}
}

// A cluster's job shows the node it ran on, and why it was queued again.
func TestJobShowsNode(t *testing.T) {
	host, fj := jobDaemon(t)
	fj.result.Node, fj.result.Attempts = "n2", 2
	fj.result.Requeued = "node n1 lost while the job ran (attempt 1 of 2)"
	code, out, errs := shoal(t, host, "job", "get", "j1")
	if code != 0 || !strings.Contains(out, "node:     n2\n") ||
		!strings.Contains(out, "requeued: node n1 lost while the job ran (attempt 1 of 2) (attempts 2)\n") {
		t.Fatalf("job get: %d\n%s%s", code, out, errs)
	}
	fj.listed = []types.Job{{ID: "j1", Tenant: "a", Image: "busybox:1", State: types.JobRunning, Node: "n3"},
		{ID: "j2", Tenant: "a", Image: "busybox:1", State: types.JobQueued}}
	code, out, errs = shoal(t, host, "job", "ls")
	lines := strings.Split(strings.TrimSpace(out), "\n")
	if code != 0 || len(lines) != 3 || !strings.Contains(lines[0], "NODE") ||
		!strings.Contains(lines[1], " n3 ") || !strings.Contains(lines[2], " - ") {
		t.Fatalf("job ls: %d\n%s%s", code, out, errs)
	}
}
