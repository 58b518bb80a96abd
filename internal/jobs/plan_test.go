package jobs

import (
	"testing"

	"github.com/shoal-run/shoal/internal/api/types"
	"github.com/shoal-run/shoal/internal/errdefs"
)

// TestPlanRefusesNUL: a NUL byte, which a step's command encoding cannot
// carry (stub.Encode), is refused where it is, naming the field.
func TestPlanRefusesNUL(t *testing.T) {
	for field, st := range map[string]types.JobStep{
		"steps[0].args":    {Args: []string{"echo", "a\x00b"}},
		"steps[0].env[0]":  {Args: []string{"true"}, Env: []string{"A=a\x00b"}},
		"steps[0].workdir": {Args: []string{"true"}, Workdir: "/work/a\x00b"},
	} {
		_, err := NewPlan(types.JobRequest{Image: "busybox:1", Steps: []types.JobStep{st}}, "")
		if errdefs.Field(err) != field {
			t.Errorf("%s: %v (field %q)", field, err, errdefs.Field(err))
		}
	}
}
