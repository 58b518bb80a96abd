package sandbox

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/shoal-run/shoal/internal/api/types"
	"github.com/shoal-run/shoal/internal/jobs"
	"github.com/shoal-run/shoal/internal/sandbox/stub/stubtest"
)

// TestWarmSandbox: with sandboxes kept warm, a job of the last job's shape
// runs its first step in one created ahead, whose stub runs the step's
// command with its stdin, environment, directory and files as the
// ordinary path does; a command that cannot run is reported the same way;
// a job of another shape takes the ordinary path; Close leaves nothing.
func TestWarmSandbox(t *testing.T) {
	modes(t, func(t *testing.T, sb *Sandbox) {
		sb.Stub = filepath.Join(filepath.Dir(sb.Dir), "shoal-init")
		if err := stubtest.Build(sb.Stub); err != nil {
			t.Fatal(err)
		}
		sb.Warm = 1
		run := func(req types.JobRequest) jobs.Job {
			t.Helper()
			req.Image = "busybox:1"
			p, err := jobs.NewPlan(req, "")
			if err != nil {
				t.Fatal(err)
			}
			j := jobs.Job{ID: fmt.Sprintf("jw%d-%d", os.Getpid(), jobSeq.Add(1))}
			if err := sb.Run(context.Background(), &j, p, func() {}); err != nil {
				t.Fatal(err)
			}
			sb.pool.releases.Wait() // its sandbox back in the pool: the next job finds it
			return j
		}
		warm := "if test -e /dev/shoal-init; then echo warm; else echo cold; fi; "
		first := run(types.JobRequest{Steps: []types.JobStep{shStep(warm, nil)}})
		wantStatus(t, first.Steps[0], jobs.StepOK)
		if first.Steps[0].Stdout != "cold\n" {
			t.Fatalf("the first job of a shape: %q, want the ordinary path", first.Steps[0].Stdout)
		}
		// The pool fills in the background: a few jobs of the shape, and
		// one of them must have found a warm sandbox.
		var got jobs.Job
		for i := 0; i < 20; i++ {
			got = run(types.JobRequest{Env: []string{"A=job"}, Files: map[string][]byte{"in/x": []byte("file\n")}, Steps: []types.JobStep{
				{Args: []string{"sh", "-c", warm + `read l; echo "$l $A $B $(pwd) $(cat x)"`}, Env: []string{"B=step"}, Workdir: "/work/in", Stdin: []byte("stdin\n")},
				shStep("cat in/x", nil),
			}})
			if strings.HasPrefix(got.Steps[0].Stdout, "warm\n") {
				break
			}
		}
		wantStatus(t, got.Steps[0], jobs.StepOK)
		wantStatus(t, got.Steps[1], jobs.StepOK)
		if st := sb.WarmStats(); st.Hits < 1 || st.Misses < 1 {
			t.Fatalf("warm stats %+v: want the first job's miss and at least one hit", st)
		}
		if got.Steps[0].Stdout != "warm\nstdin job step /work/in file\n" || got.Steps[1].Stdout != "file\n" || got.Steps[0].MemoryPeak == 0 {
			t.Fatalf("a job in a warm sandbox: %+v", got.Steps)
		}
		// The pool holds a sandbox of the default shape again by now, or
		// the ordinary path runs it: the answer is the same.
		missing := run(types.JobRequest{Steps: []types.JobStep{{Args: []string{"no-such-command"}}}})
		s := missing.Steps[0]
		if s.Status != jobs.StepNonzeroExit || s.ExitCode != 127 || !strings.Contains(s.Error, "no-such-command") || s.Stderr != "" {
			t.Fatalf("a missing command in a warm sandbox: %+v", s)
		}
		// Jobs of two shapes interleaved: the other shape never takes over,
		// so the kept one stays warm.
		for i := 0; i < 3; i++ {
			other := run(types.JobRequest{Limits: types.JobLimits{Memory: "64Mi"}, Steps: []types.JobStep{shStep(warm, nil)}})
			if other.Steps[0].Stdout != "cold\n" {
				t.Fatalf("a job of another shape: %q", other.Steps[0].Stdout)
			}
			run(types.JobRequest{Steps: []types.JobStep{shStep(warm, nil)}})
		}
		sb.Close()
		if left, _ := os.ReadDir(sb.Dir); len(left) != 0 {
			t.Fatalf("left after Close: %v", left)
		}
	})
}
