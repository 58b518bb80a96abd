package sandbox

import (
	"strings"
	"testing"

	"github.com/shoal-run/shoal/internal/api/types"
	"github.com/shoal-run/shoal/internal/jobs"
)

// TestReusedSandboxLaterSteps: a job's later steps run in its reusable
// sandbox too, each in a cgroup of its own with its own limits: a step
// sees the files the last one left in /work, but nothing of it in /tmp,
// or /dev/shm, and none of its processes; a step
// whose /tmp is of another size takes the ordinary path on the same
// /work.
func TestReusedSandboxLaterSteps(t *testing.T) {
	modes(t, func(t *testing.T, sb *Sandbox) {
		reusing(t, sb)
		untilReused(t, sb, types.JobRequest{Steps: []types.JobStep{shStep("true", nil)}})
		leftovers := `echo "$(ls -A /tmp /dev/shm) procs $(ps -o comm | grep -c sleep)"`
		j := runIn(t, sb, types.JobRequest{Steps: []types.JobStep{
			shStep(servedBy+"; echo built > /work/out; touch /tmp/t /dev/shm/s; (setsid sleep 1000 &); until ps -o comm | grep -q sleep; do :; done; "+leftovers, nil),
			shStep(servedBy+"; cat /work/out; "+leftovers, &types.JobLimits{Memory: "8Mi"}),
			shStep(servedBy+"; head -c 500m /dev/zero | tail", &types.JobLimits{Memory: "32Mi"}),
			shStep(servedBy+"; cat /work/out; ls -A /tmp", &types.JobLimits{TmpSize: "2Mi"}),
		}})
		if len(j.Steps) != 4 {
			t.Fatalf("steps: %+v", j.Steps)
		}
		box, first, _ := strings.Cut(j.Steps[0].Stdout, "\n")
		wantStatus(t, j.Steps[0], jobs.StepOK)
		if first != "/dev/shm:\ns\n\n/tmp:\nt procs 1\n" {
			t.Fatalf("the first step: %q", j.Steps[0].Stdout)
		}
		wantStatus(t, j.Steps[1], jobs.StepOK)
		if j.Steps[1].Stdout != box+"\nbuilt\n/dev/shm:\n\n/tmp: procs 0\n" {
			t.Fatalf("the second step, in %s: %q, want the first one's /work only, in the same sandbox", box, j.Steps[1].Stdout)
		}
		// Its own limits: the memory of the third step's own cgroup.
		if s := j.Steps[2]; !strings.HasPrefix(s.Stdout, box+"\n") || s.Status != jobs.StepOOM {
			t.Fatalf("the third step (32 MiB, a line of 500 MiB held by tail): %+v", s)
		}
		if s := j.Steps[3]; s.Status != jobs.StepOK || strings.HasPrefix(s.Stdout, box+"\n") || !strings.HasSuffix(s.Stdout, "\nbuilt\n") {
			t.Fatalf("the fourth step (another /tmp size), want the ordinary path on the same /work: %+v", s)
		}
	})
}
