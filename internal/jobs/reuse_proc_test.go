package jobs

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/shoal-run/shoal/internal/image"
	"github.com/shoal-run/shoal/internal/runtime/cgroups"
)

// TestBoxProcKillFails: a step in a reusable sandbox whose cgroup cannot
// be killed, killed at once for its output (from the goroutine reading it)
// and for its end (from the one waiting for it), leaves its sandbox not
// to be reused, without the two racing on the sandbox (run with -race).
func TestBoxProcKillFails(t *testing.T) {
	pr := &boxProc{cg: cgroups.Paths{V2: true, Unified: filepath.Join(t.TempDir(), "gone")}, replies: make(chan reply, 1)}
	pr.replies <- reply{} // the stub ended (exit 0)
	outR, outW, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	errR, errW, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	errW.Close()
	go func() { outW.Write(make([]byte, 64)); outW.Close() }()
	s := &Sandbox{}
	var res StepResult
	end, _, err := s.supervise(context.Background(), pr, Limits{Timeout: time.Hour, OutputBytes: 8}, outR, errR, &res)
	if err != nil || !end.output {
		t.Fatalf("end %+v, %v: want killed for its output", end, err)
	}
	if !pr.failed() {
		t.Fatal("a step whose cgroup could not be killed does not say so")
	}
}

// TestMakeWarmNamesSandbox: a warm sandbox that cannot be made says which
// (its id names its work directory, container and cgroups).
func TestMakeWarmNamesSandbox(t *testing.T) {
	s := &Sandbox{Dir: filepath.Join(t.TempDir(), "gone")}
	b, err := s.makeWarm(warmKey{work: 1 << 20}, image.Image{})
	if err == nil || b == nil || !strings.Contains(err.Error(), "sandbox "+b.id+": ") {
		t.Fatalf("makeWarm in a missing directory: %v", err)
	}
}
