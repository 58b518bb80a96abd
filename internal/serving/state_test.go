package serving

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/shoal-run/shoal/internal/api/types"
	"github.com/shoal-run/shoal/internal/labels"
	"github.com/shoal-run/shoal/internal/manifest"
	"github.com/shoal-run/shoal/internal/runtime"
	"github.com/shoal-run/shoal/internal/store"
)

const stateTables = "[volumes]\ndata = \"/data\"\n[state]\ndir = \"/state\"\n"

// stateSource is where replica id's state directory is on the host: the
// source of its container's /state mount.
func (h *harness) stateSource(id string) string {
	h.t.Helper()
	c, err := h.rt.get(id)
	if err != nil {
		h.t.Fatal(err)
	}
	for _, mt := range c.spec.Mounts {
		if mt.Destination == "/state" {
			return mt.Source
		}
	}
	h.t.Fatalf("replica %s has no /state mount: %+v", id, c.spec.Mounts)
	return ""
}

func (h *harness) volume() string { return filepath.Join(h.m.appDir("hello"), "volumes", "data") }

// merged returns the merge events of replica id.
func (h *harness) merged(kind, id string) []types.Event {
	var out []types.Event
	for _, e := range h.ev.of(kind) {
		if e.Replica == id {
			out = append(out, e)
		}
	}
	return out
}

func TestStateMergedWhenReplicasGo(t *testing.T) {
	h := newHarness(t)
	h.deploy("min = 2\nidle_timeout = \"30s\"\nfreeze_timeout = \"1m\"", stateTables+"merge = \"append\"")
	h.wait("two ready replicas", func() bool { return len(h.replicas()[StateReady]) == 2 })
	ids := h.replicas()[StateReady]
	for _, id := range ids {
		writeTree(t, h.stateSource(id), map[string]string{"access.log": id + " 1\n" + id + " 2\n"})
	}
	// A crash is a replica gone for good: its state is merged.
	h.rt.exit(ids[0], 1)
	h.wait("the crashed replica's state is merged", func() bool { return len(h.merged("merge", ids[0])) == 1 })
	e := h.merged("merge", ids[0])[0]
	if e.Inputs["files"] != 1 || e.Inputs["bytes"] != float64(2*len(ids[0])+6) || !strings.Contains(e.Reason, "append") {
		t.Fatalf("merge event %+v", e)
	}
	if _, err := os.Stat(filepath.Join(h.m.appDir("hello"), "state", "gone", ids[0])); !os.IsNotExist(err) {
		t.Fatalf("the merged state area stays: %v", err)
	}
	// Scale down to zero: the others freeze, then stop after
	// freeze_timeout, and go the same way.
	zero := 0
	if _, err := h.m.Scale(context.Background(), "hello", types.ScaleRequest{Min: &zero}); err != nil {
		t.Fatal(err)
	}
	h.wait("the replacement is ready", func() bool { return len(h.replicas()[StateReady]) >= 1 })
	all := append([]string{}, ids...)
	for _, id := range h.replicas()[StateReady] {
		if id != ids[1] {
			writeTree(t, h.stateSource(id), map[string]string{"access.log": id + " 1\n", "sub/x": id + "\n"})
			all = append(all, id)
		}
	}
	h.advanceUntil("every replica stops", 30*time.Second, func() bool {
		r := h.replicas()
		return len(r[StateReady])+len(r[StateFrozen])+len(r[StateStopped])+len(r[StateStarting]) == 0
	})
	h.wait("every replica's state is merged", func() bool { return len(h.ev.of("merge")) == len(all) })
	log := readFile(t, filepath.Join(h.volume(), "access.log"))
	for _, id := range all {
		if n := strings.Count(log, id+" 1\n"); n != 1 {
			t.Fatalf("%s's line is %d times in the merged log:\n%s", id, n, log)
		}
	}
	if ents, _ := os.ReadDir(filepath.Join(h.m.appDir("hello"), "state", "live")); len(ents) != 0 {
		t.Fatalf("live state areas left: %v", ents)
	}
}

func TestStateMergeFailsKeepsAndRetries(t *testing.T) {
	h := newHarness(t)
	h.deploy("min = 1", stateTables+"merge = \"newest\"")
	h.wait("a ready replica", func() bool { return len(h.replicas()[StateReady]) == 1 })
	id := h.replicas()[StateReady][0]
	writeTree(t, h.stateSource(id), map[string]string{"a": "A", "b/c": "C"})
	// The volume has a directory where the state has a file.
	if err := os.MkdirAll(filepath.Join(h.volume(), "b", "c"), 0o755); err != nil {
		t.Fatal(err)
	}
	h.rt.exit(id, 1)
	h.wait("the merge fails", func() bool { return len(h.merged("merge-failed", id)) == 1 })
	if e := h.merged("merge-failed", id)[0]; !strings.Contains(e.Reason, "b/c") || !strings.Contains(e.Reason, "kept") {
		t.Fatalf("event %+v", e)
	}
	gone := filepath.Join(h.m.appDir("hello"), "state", "gone", id, "data")
	if _, err := os.Stat(filepath.Join(gone, "b", "c")); err != nil {
		t.Fatalf("the state that failed to merge is not kept: %v", err)
	}
	os.RemoveAll(filepath.Join(h.volume(), "b"))
	// Tried again after its back-off, on the clock.
	h.advanceUntil("the merge is tried again", time.Second, func() bool { return len(h.merged("merge", id)) == 1 })
	if readFile(t, filepath.Join(h.volume(), "a")) != "A" || readFile(t, filepath.Join(h.volume(), "b", "c")) != "C" {
		t.Fatal("merged content")
	}
}

func TestStateHook(t *testing.T) {
	h := newHarness(t)
	var got runtime.Spec
	fail := true
	h.rt.hook = func(s runtime.Spec) int {
		got = s
		if fail {
			fail = false
			return 3
		}
		// The hook sees the state and the volume where the app does.
		var src, dst string
		for _, mt := range s.Mounts {
			switch mt.Destination {
			case "/state":
				src = mt.Source
			case "/data":
				dst = mt.Source
			}
		}
		b, _ := os.ReadFile(filepath.Join(src, "log"))
		f, _ := os.OpenFile(filepath.Join(dst, "merged"), os.O_WRONLY|os.O_APPEND|os.O_CREATE, 0o644)
		f.Write(b)
		f.Close()
		return 0
	}
	h.deploy("min = 1", stateTables+"merge = \"hook\"\nhook = [\"sh\", \"-c\", \"cat /state/* >> /data/merged\"]")
	h.wait("a ready replica", func() bool { return len(h.replicas()[StateReady]) == 1 })
	id := h.replicas()[StateReady][0]
	writeTree(t, h.stateSource(id), map[string]string{"log": "hooked\n"})
	h.rt.exit(id, 1)
	h.wait("the hook fails once", func() bool { return len(h.merged("merge-failed", id)) == 1 })
	if e := h.merged("merge-failed", id)[0]; !strings.Contains(e.Reason, "exited with code 3") {
		t.Fatalf("event %+v", e)
	}
	h.advanceUntil("the hook runs again", time.Second, func() bool { return len(h.merged("merge", id)) == 1 })
	if s := readFile(t, filepath.Join(h.volume(), "merged")); s != "hooked\n" {
		t.Fatalf("merged %q", s)
	}
	if strings.Join(got.Args, " ") != "sh -c cat /state/* >> /data/merged" || !got.Ephemeral || got.Limits.Pids != manifest.DefaultPids ||
		got.Layers[0] != emptyLayer() {
		t.Fatalf("hook container %+v", got)
	}
	h.rt.mu.Lock()
	for cid, c := range h.rt.ctrs {
		if c.spec.Labels[labels.Kind] == labels.KindMerge {
			t.Errorf("hook container %s left", cid)
		}
	}
	h.rt.mu.Unlock()
	if e := h.merged("merge", id)[0]; !strings.Contains(e.Reason, "ran again") {
		t.Fatalf("a hook run after one cut short says so: %+v", e)
	}
}

// A replica whose record a stopped daemon never wrote, and whose container
// the next daemon removed as an orphan, still has its state merged.
func TestStateOrphanMergedOnRestart(t *testing.T) {
	h := newHarness(t)
	h.deploy("min = 1", stateTables+"merge = \"append\"")
	h.wait("a ready replica", func() bool { return len(h.replicas()[StateReady]) == 1 })
	id := h.replicas()[StateReady][0]
	writeTree(t, h.stateSource(id), map[string]string{"log": "orphan\n"})
	h.m.Close()
	if err := h.m.o.Store.Delete(context.Background(), store.ReplicaKey("hello", id)); err != nil {
		t.Fatal(err)
	}
	h.rt.Delete(context.Background(), id)
	o := h.m.o
	o.Registerer = nil
	m2, err := New(o)
	if err != nil {
		t.Fatal(err)
	}
	if err := m2.Start(context.Background()); err != nil {
		t.Fatal(err)
	}
	defer m2.Close()
	h.wait("the orphan's state is merged", func() bool { return len(h.merged("merge", id)) == 1 })
	if s := readFile(t, filepath.Join(h.volume(), "log")); s != "orphan\n" {
		t.Fatalf("merged %q", s)
	}
}

// Deleting the app takes its state, merged or not, and its logs; its
// volumes stay.
func TestStateGoesWithTheApp(t *testing.T) {
	h := newHarness(t)
	h.deploy("min = 2", stateTables+"merge = \"append\"")
	h.wait("two ready replicas", func() bool { return len(h.replicas()[StateReady]) == 2 })
	for _, id := range h.replicas()[StateReady] {
		writeTree(t, h.stateSource(id), map[string]string{"log": id})
	}
	dir := h.m.appDir("hello")
	if err := h.m.Remove(context.Background(), "hello"); err != nil {
		t.Fatal(err)
	}
	ents, err := os.ReadDir(dir)
	if err != nil || len(ents) != 1 || ents[0].Name() != "volumes" {
		t.Fatalf("app dir holds %v (%v), want its volumes alone", ents, err)
	}
	if _, err := os.Stat(h.volume()); err != nil {
		t.Fatalf("the volume went with the app: %v", err)
	}
	h.recorded()
	if n := len(h.ev.of("merge")) + len(h.ev.of("merge-failed")); n != 0 {
		t.Fatalf("%d merges of a deleted app", n)
	}
}

// writeTree writes files (relative path → content) under dir.
func writeTree(t *testing.T, dir string, files map[string]string) {
	t.Helper()
	for rel, content := range files {
		p := filepath.Join(dir, rel)
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, []byte(content), 0o640); err != nil {
			t.Fatal(err)
		}
	}
}

func readFile(t *testing.T, p string) string {
	t.Helper()
	b, err := os.ReadFile(p)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}
