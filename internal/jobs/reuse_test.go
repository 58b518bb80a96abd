package jobs

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/shoal-run/shoal/internal/api/types"
)

// reusing readies sb to keep one reusable sandbox.
func reusing(t *testing.T, sb *Sandbox) {
	t.Helper()
	sb.Stub = filepath.Join(filepath.Dir(sb.Dir), "shoal-init")
	cmd := exec.Command("go", "build", "-o", sb.Stub, "../../cmd/shoal-init")
	cmd.Env = append(os.Environ(), "CGO_ENABLED=0")
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("build shoal-init: %v\n%s", err, out)
	}
	if err := os.Chmod(sb.Stub, 0o755); err != nil {
		t.Fatal(err)
	}
	sb.Warm, sb.Reuse = 1, true
	t.Cleanup(sb.Close)
}

// runIn runs req (on busybox) to its end in sb.
func runIn(t *testing.T, sb *Sandbox, req types.JobRequest) Job {
	t.Helper()
	req.Image = "busybox:1"
	p, err := NewPlan(req, "")
	if err != nil {
		t.Fatal(err)
	}
	j := Job{ID: fmt.Sprintf("jr%d-%d", os.Getpid(), jobSeq.Add(1))}
	if err := sb.Run(context.Background(), &j, p, func() {}); err != nil {
		t.Fatal(err)
	}
	return j
}

// untilReused runs script until a job runs in a sandbox an earlier job
// used, and returns that job's first step.
func untilReused(t *testing.T, sb *Sandbox, req types.JobRequest) StepResult {
	t.Helper()
	before := sb.WarmStats().Reused
	for i := 0; i < 30; i++ {
		j := runIn(t, sb, req)
		if sb.WarmStats().Reused > before {
			return j.Steps[0]
		}
	}
	t.Fatalf("no job ran in a reused sandbox: %+v", sb.WarmStats())
	return StepResult{}
}

// TestReusedSandbox: a job in a reused sandbox runs its command with its
// stdin, environment, directory and files, and its later steps on the
// ordinary path, as in a fresh one.
func TestReusedSandbox(t *testing.T) {
	modes(t, func(t *testing.T, sb *Sandbox) {
		reusing(t, sb)
		req := types.JobRequest{Env: []string{"A=job"}, Files: map[string][]byte{"in/x": []byte("file\n")}, Steps: []types.JobStep{
			{Args: []string{"sh", "-c", `read l; echo "$l $A $B $(pwd) $(cat x)"`}, Env: []string{"B=step"}, Workdir: "/work/in", Stdin: []byte("stdin\n")},
			shStep("cat in/x", nil),
		}}
		st := untilReused(t, sb, req)
		wantStatus(t, st, StepOK)
		if st.Stdout != "stdin job step /work/in file\n" || st.MemoryPeak == 0 || st.CPUMs <= 0 {
			t.Fatalf("a job in a reused sandbox: %+v", st)
		}
		missing := untilReused(t, sb, types.JobRequest{Steps: []types.JobStep{{Args: []string{"no-such-command"}}}})
		if missing.Status != StepNonzeroExit || missing.ExitCode != 127 || !strings.Contains(missing.Error, "no-such-command") {
			t.Fatalf("a missing command in a reused sandbox: %+v", missing)
		}
		sb.Close()
		if left, _ := os.ReadDir(sb.Dir); len(left) != 0 {
			t.Fatalf("left after Close: %v", left)
		}
	})
}
