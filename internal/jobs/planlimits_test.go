package jobs

import (
	"context"
	"strings"
	"testing"

	"github.com/shoal-run/shoal/internal/api/types"
	"github.com/shoal-run/shoal/internal/errdefs"
	"github.com/shoal-run/shoal/internal/store"
)

// A step's command is bounded as its sandbox receives it: each argument
// and variable (execve's MAX_ARG_STRLEN), the variables' count and the
// whole; its name too. The error names the field.
func TestPlanBoundsCommands(t *testing.T) {
	big := strings.Repeat("a", MaxArgBytes+1)
	half := strings.Repeat("a", MaxArgBytes)
	many := make([]string, MaxEnv+1)
	for i := range many {
		many[i] = "A=1"
	}
	for field, req := range map[string]types.JobRequest{
		"steps[0].args[1]": {Steps: []types.JobStep{{Args: []string{"echo", big}}}},
		"steps[0].env[0]":  {Steps: []types.JobStep{{Args: []string{"true"}, Env: []string{"A=" + big}}}},
		"env[0]":           {Env: []string{"A=" + big}, Steps: []types.JobStep{{Args: []string{"true"}}}},
		"steps[0].env":     {Env: many[:MaxEnv], Steps: []types.JobStep{{Args: []string{"true"}, Env: many[:1]}}},
		"steps[0].args":    {Steps: []types.JobStep{{Args: append([]string{"echo"}, half, half, half, half, half, half, half, half)}}},
		"steps[0].name":    {Steps: []types.JobStep{{Name: strings.Repeat("n", MaxNameLen+1), Args: []string{"true"}}}},
	} {
		req.Image = "busybox:1"
		_, err := NewPlan(req, "")
		if !errdefs.IsInvalid(err) || errdefs.Field(err) != field {
			t.Errorf("%s: %v (field %q)", field, err, errdefs.Field(err))
		}
	}
	ok := types.JobRequest{Image: "busybox:1", Env: many[:MaxEnv/2], Steps: []types.JobStep{
		{Args: append([]string{"echo"}, half, half, half, half, half, half), Env: many[:MaxEnv/2]}}}
	if _, err := NewPlan(ok, ""); err != nil {
		t.Fatalf("a command within the limits: %v", err)
	}
	// In a batch, the job's environment is named with its index.
	if _, err := NewPlan(types.JobRequest{Image: "busybox:1", Env: []string{"A=" + big}, Steps: []types.JobStep{{Args: []string{"true"}}}}, "jobs[2]."); errdefs.Field(err) != "jobs[2].env[0]" {
		t.Errorf("batch job env: %v (field %q)", err, errdefs.Field(err))
	}
}

// A batch of more than MaxBatch jobs is refused whole, nothing stored.
func TestSubmitBoundsBatch(t *testing.T) {
	st := openStore(t)
	m := openManager(t, Options{Store: st, Runner: newFakeRunner(false), Slots: 1})
	defer m.Close()
	reqs := make([]types.JobRequest, MaxBatch+1)
	for i := range reqs {
		reqs[i] = hello("a")
	}
	_, err := m.Submit(context.Background(), reqs)
	if !errdefs.IsInvalid(err) || errdefs.Field(err) != "jobs" || !strings.Contains(err.Error(), "1001 jobs are more than 1000") {
		t.Fatalf("batch of %d jobs: %v", len(reqs), err)
	}
	if kvs, _ := st.List(context.Background(), store.JobsPrefix); len(kvs) != 0 {
		t.Fatalf("%d jobs stored after a refused batch", len(kvs))
	}
}
