package jobs

import (
	"path"
	"strings"
	"testing"

	"github.com/shoal-run/shoal/internal/api/types"
	"github.com/shoal-run/shoal/internal/errdefs"
	"github.com/shoal-run/shoal/internal/httperr"
)

// FuzzNewPlan decodes job requests as the API does and plans them: a
// refusal is an invalid input naming its field, and an accepted plan keeps
// every bound the sandbox relies on (steps, limits within their ceilings,
// input files clean paths inside the work directory).
func FuzzNewPlan(f *testing.F) {
	for _, s := range []string{
		`{"image":"busybox:1","steps":[{"args":["true"]}]}`,
		`{"image":"a","tenant":"t-1","priority":5,"files":{"d/in.txt":"eA=="},"limits":{"work_size":"8Mi","tmp_size":"4Mi"},"steps":[{"args":["sh","-c","x"],"if":"success","ok_codes":[0,3],"limits":{"memory":"32Mi","cpus":0.5,"pids":10,"timeout":"2s","cpu_time":"1s","output":"1Ki"}}]}`,
		`{"image":"a","files":{"../x":""},"steps":[{"args":["x"]}]}`,
		`{"image":"a","files":{"/etc/passwd":""},"steps":[{"args":["x"]}]}`,
		`{"image":"a","steps":[{"args":["x"],"workdir":"rel"}]}`,
		`{"image":"a","steps":[{"args":["x"],"limits":{"work_size":"1Mi"}}]}`,
		`{"image":"a","steps":[{"args":["x"],"limits":{"cpus":1e309}}]}`,
		`{"image":"a","callback":"file:///etc/passwd","steps":[{"args":["x"]}]}`,
		`{"image":"a","env":["=x"],"steps":[{"args":["x"]}]}`,
	} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, body []byte) {
		var req types.JobRequest
		if err := httperr.DecodeJSON(body, &req); err != nil {
			if errdefs.Field(err) == "" {
				t.Fatalf("decode error %v names no field", err)
			}
			return
		}
		p, err := NewPlan(req, "")
		if err != nil {
			if !errdefs.IsInvalid(err) || errdefs.Field(err) == "" {
				t.Fatalf("plan error %v is not an invalid input naming its field", err)
			}
			return
		}
		if len(p.Steps) == 0 || len(p.Steps) > MaxSteps || p.Work < 1<<20 || p.Work > maxLimits.WorkBytes {
			t.Fatalf("plan of %d steps, work %d", len(p.Steps), p.Work)
		}
		for name := range p.Req.Files {
			if path.IsAbs(name) || path.Clean(name) != name || name == ".." || strings.HasPrefix(name, "../") {
				t.Fatalf("file %q accepted", name)
			}
		}
		for i, s := range p.Steps {
			l := s.Limits
			if len(s.Args) == 0 || l.MemoryBytes < 4<<20 || l.MemoryBytes > maxLimits.MemoryBytes || l.CPUs <= 0 || l.CPUs > maxLimits.CPUs ||
				l.Pids <= 0 || l.Pids > maxLimits.Pids || l.Timeout <= 0 || l.Timeout > maxLimits.Timeout ||
				l.OutputBytes < 0 || l.OutputBytes > maxLimits.OutputBytes || l.TmpBytes < 1<<20 || l.TmpBytes > maxLimits.TmpBytes || l.CPUTimeLimit() <= 0 {
				t.Fatalf("step %d accepted with limits %+v", i, l)
			}
		}
	})
}
