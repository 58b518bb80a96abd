package runtime

import (
	"context"
	"os"
	"path/filepath"
	"syscall"
	"testing"
)

func TestRecover(t *testing.T) {
	needRoot(t)
	records := &MemRecords{}
	dir := t.TempDir()
	opts := Options{Root: filepath.Join(dir, "containers"), RuntimeRoot: filepath.Join(dir, "runc"), Records: records, CgroupParent: testCgroupParent}
	r1, err := New(context.Background(), opts)
	if err != nil {
		t.Fatal(err)
	}
	keep := baseSpec(t, "sleep", "300")
	c, err := r1.Run(context.Background(), keep)
	if err != nil {
		t.Fatal(err)
	}
	// An orphan: a container whose record is lost.
	orphan := baseSpec(t, "sleep", "300")
	if _, err := r1.Run(context.Background(), orphan); err != nil {
		t.Fatal(err)
	}
	_ = records.Delete(context.Background(), orphan.ID)
	// A record whose container died while no daemon watched.
	dead := baseSpec(t, "sleep", "300")
	if _, err := r1.Run(context.Background(), dead); err != nil {
		t.Fatal(err)
	}
	if err := r1.Signal(dead.ID, syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	wait(t, r1, dead.ID)
	// A stray cgroup with no container at all.
	stray := testID(t)
	strayDir := r1.cgroupPaths(stray).V1["pids"]
	if r1.layout.V2Only() {
		strayDir = r1.cgroupPaths(stray).Unified
	}
	if err := os.MkdirAll(strayDir, 0o755); err != nil {
		t.Fatal(err)
	}

	r2, err := New(context.Background(), opts)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		for _, id := range []string{keep.ID, orphan.ID, dead.ID, stray} {
			_ = r2.Delete(context.Background(), id)
		}
	})
	adopted, removed, err := r2.Recover(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	byID := map[string]*Container{}
	for _, a := range adopted {
		byID[a.ID] = a
	}
	if a := byID[keep.ID]; len(adopted) != 2 || a == nil || a.Pid != c.Pid || a.Status != StatusRunning {
		t.Fatalf("adopted %d containers, want %s running with pid %d and %s stopped", len(adopted), keep.ID, c.Pid, dead.ID)
	}
	// A recorded container that exited while no daemon watched stays listed
	// as stopped, with its exit status unknown, until it is deleted.
	if a := byID[dead.ID]; a == nil || a.Status != StatusStopped {
		t.Fatalf("dead container %s not kept as stopped: %+v", dead.ID, a)
	}
	if st, err := r2.Wait(context.Background(), dead.ID); err != nil || st.Known {
		t.Fatalf("wait on a recovered stopped container: %+v, %v; want an unknown status", st, err)
	}
	if err := r2.Delete(context.Background(), dead.ID); err != nil {
		t.Fatal(err)
	}
	assertGone(t, r2, dead.ID)
	for _, id := range []string{orphan.ID, stray} {
		found := false
		for _, x := range removed {
			found = found || x == id
		}
		if !found {
			t.Errorf("%s not in removed %v", id, removed)
		}
		assertGone(t, r2, id)
	}
	// The adopted container is fully managed: stats, freeze, stop, delete.
	if _, err := r2.Stats(keep.ID); err != nil {
		t.Fatal(err)
	}
	if _, err := r2.Stop(context.Background(), keep.ID, 0); err != nil {
		t.Fatal(err)
	}
	if err := r2.Delete(context.Background(), keep.ID); err != nil {
		t.Fatal(err)
	}
	assertGone(t, r2, keep.ID)
}

// TestEphemeralNotRecorded checks that an ephemeral container is never
// written to the records and that a new Runtime removes it as an orphan.
func TestEphemeralNotRecorded(t *testing.T) {
	records := &MemRecords{}
	dir := t.TempDir()
	opts := Options{Root: filepath.Join(dir, "containers"), RuntimeRoot: filepath.Join(dir, "runc"), Records: records, CgroupParent: testCgroupParent}
	r1, err := New(context.Background(), opts)
	if err != nil {
		t.Fatal(err)
	}
	s := baseSpec(t, "sleep", "300")
	s.Ephemeral = true
	if _, err := r1.Run(context.Background(), s); err != nil {
		t.Fatal(err)
	}
	if recs, _ := records.List(context.Background()); len(recs) != 0 {
		t.Fatalf("ephemeral container recorded: %+v", recs)
	}
	if cs, _ := r1.List(context.Background()); len(cs) != 1 || cs[0].ID != s.ID {
		t.Fatalf("ephemeral container not listed by its runtime: %+v", cs)
	}
	r2, err := New(context.Background(), opts)
	if err != nil {
		t.Fatal(err)
	}
	adopted, removed, err := r2.Recover(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	if len(adopted) != 0 || len(removed) != 1 || removed[0] != s.ID {
		t.Fatalf("recover: adopted %d, removed %v; want the ephemeral container removed", len(adopted), removed)
	}
	assertGone(t, r2, s.ID)
}
