package daemon

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/shoal-run/shoal/internal/runtime"
	"github.com/shoal-run/shoal/internal/runtime/cgroups"
	"github.com/shoal-run/shoal/internal/store"
)

// listFails is a store whose List fails, so that jobs.Open fails while it
// reads the stored jobs.
type listFails struct{ store.Store }

func (listFails) List(context.Context, string) ([]store.KV, error) {
	return nil, errors.New("the disk is gone")
}

// TestOpenJobsErrorLeavesNothing: when the job queue cannot open after the
// sandboxes' runtime did, the sandboxes' cgroup parent (here left by a
// daemon that died) and the directories made for them are removed.
func TestOpenJobsErrorLeavesNothing(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Fatal("this test needs root: it opens a runtime and cgroups")
	}
	if err := runtime.UserNSUsable(jobHostID, jobIDs); err != nil {
		t.Fatalf("this test needs user namespaces: %v", err)
	}
	t.Setenv("SHOAL_JOB_USERNS", "")
	// The sandbox directory is next to the data dir: the path to it must be
	// searchable by the sandboxes' host uid.
	base, err := os.MkdirTemp("", "shoal-daemon-jobs-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(base) })
	if err := os.Chmod(base, 0o711); err != nil {
		t.Fatal(err)
	}
	cfg := Config{DataDir: filepath.Join(base, "data"), RunDir: filepath.Join(base, "run"), Cgroup: fmt.Sprintf("/shoal-daemon-test-%d", os.Getpid())}
	for _, d := range []string{cfg.DataDir, cfg.RunDir} {
		if err := os.MkdirAll(d, 0o700); err != nil {
			t.Fatal(err)
		}
	}
	ctx := context.Background()
	rt, err := runtime.New(ctx, runtime.Options{Root: filepath.Join(cfg.DataDir, "containers"), RuntimeRoot: filepath.Join(cfg.RunDir, "runc"), CgroupParent: cfg.Cgroup})
	if err != nil {
		t.Fatal(err)
	}
	st, err := store.OpenBolt(filepath.Join(cfg.DataDir, "store.db"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { st.Close() })

	layout, err := cgroups.ReadLayout()
	if err != nil {
		t.Fatal(err)
	}
	parent := layout.Paths(cfg.Cgroup + "-jobs")
	t.Cleanup(func() {
		for _, d := range parent.Dirs() {
			os.Remove(d)
		}
	})
	for _, d := range parent.Dirs() {
		if err := os.MkdirAll(d, 0o755); err != nil {
			t.Fatal(err)
		}
	}

	d := &Daemon{cfg: cfg, log: slog.New(slog.DiscardHandler), rt: rt, store: listFails{st}, reg: prometheus.NewRegistry()}
	err = d.openJobs(ctx)
	if err == nil {
		d.closeJobs()
		t.Fatal("openJobs succeeded with a store that cannot list")
	}
	if len(d.notes) == 0 || !strings.Contains(d.notes[0], "user namespace mapped") {
		t.Fatalf("the sandboxes' runtime was not opened (notes %q); the test covers nothing", d.notes)
	}
	for _, dir := range parent.Dirs() {
		if _, err := os.Stat(dir); !errors.Is(err, os.ErrNotExist) {
			t.Errorf("cgroup %s left after the error", dir)
		}
	}
	for _, p := range []string{d.sandboxDir(), filepath.Join(cfg.RunDir, "runc-jobs")} {
		if _, err := os.Stat(p); !errors.Is(err, os.ErrNotExist) {
			t.Errorf("%s left after the error", p)
		}
	}
}
