package sandbox

import (
	"context"
	"fmt"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/shoal-run/shoal/internal/api/types"
	"github.com/shoal-run/shoal/internal/jobs"
)

// TestReusedSandboxCancelled: a job cancelled while its step runs in a
// reused sandbox ends killed, with all the step started; the step's
// cgroup is gone; the next job runs in the same sandbox; Close leaves
// neither the sandbox's cgroup nor its work directory.
func TestReusedSandboxCancelled(t *testing.T) {
	modes(t, func(t *testing.T, sb *Sandbox) {
		reusing(t, sb)
		first := untilReused(t, sb, types.JobRequest{Steps: []types.JobStep{shStep(servedBy, nil)}})
		sb.pool.mu.Lock()
		z := sb.pool.ready[0].z
		sb.pool.mu.Unlock()
		step := z.cg.Child(fmt.Sprintf("step%d", z.seq))
		ctx, cancel := context.WithCancel(context.Background())
		defer cancel()
		p, err := jobs.NewPlan(types.JobRequest{Image: "busybox:1", Steps: []types.JobStep{shStep("(setsid sleep 1000 &); sleep 1000", nil)}}, "")
		if err != nil {
			t.Fatal(err)
		}
		j := jobs.Job{ID: fmt.Sprintf("jc%d-%d", os.Getpid(), jobSeq.Add(1))}
		done := make(chan error, 1)
		go func() { done <- sb.Run(ctx, &j, p, func() {}) }()
		for i := 0; ; i++ {
			if procs, _ := step.Procs(); len(procs) >= 2 {
				break
			}
			if i == 2000 {
				t.Fatal("the step never started")
			}
			time.Sleep(5 * time.Millisecond)
		}
		cancel()
		if err := <-done; err != nil {
			t.Fatal(err)
		}
		if s := j.Steps[0]; s.Status != jobs.StepKilled {
			t.Fatalf("a cancelled step: %+v", s)
		}
		sb.pool.releases.Wait() // the sandbox emptied, off the job's slot
		if step.Exists() {
			t.Fatalf("the cancelled step's cgroup %v is left", step.Dirs())
		}
		next := runIn(t, sb, types.JobRequest{Steps: []types.JobStep{shStep(servedBy, nil)}}).Steps[0]
		wantStatus(t, next, jobs.StepOK)
		if next.Stdout != first.Stdout {
			t.Fatalf("after a cancelled job the next one ran in %q, want the same sandbox %q", strings.TrimSpace(next.Stdout), strings.TrimSpace(first.Stdout))
		}
		sb.Close()
		if z.cg.Exists() {
			t.Fatalf("the sandbox's cgroup %v is left after Close", z.cg.Dirs())
		}
		if left, _ := os.ReadDir(sb.Dir); len(left) != 0 {
			t.Fatalf("left after Close: %v", left)
		}
	})
}
