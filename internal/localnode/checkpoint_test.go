package localnode

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"testing"

	"github.com/shoal-run/shoal/internal/runtime"
)

// Checkpoints lie apart from the apps' folders: an app named checkpoints
// keeps its volumes, logs and state when a node starts (which empties
// the checkpoints folder) or drops a checkpoint, and a checkpoint of an
// app named volumes is not written into that app's folder.
func TestCheckpointsApartFromApps(t *testing.T) {
	dir := t.TempDir()
	write := func(rel string) {
		t.Helper()
		p := filepath.Join(dir, rel)
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, []byte("x"), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	kept := []string{
		"checkpoints/volumes/data/db", "checkpoints/logs/r1.log", "checkpoints/state/live/r1/f",
		"volumes/volumes/data/db",
	}
	for _, p := range kept {
		write(p)
	}
	write(filepath.Join(checkpointsDir, "hello", "r0", "inventory.img"))
	n := fileHost(t, Options{Dir: dir})
	if _, err := os.Stat(filepath.Join(dir, checkpointsDir)); !os.IsNotExist(err) {
		t.Fatalf("old checkpoints after a start: %v", err)
	}
	write(filepath.Join(checkpointsDir, "volumes", "r1", "inventory.img"))
	p, err := n.checkpointPath(checkpointsDir + "/volumes/r1")
	if err != nil {
		t.Fatal(err)
	}
	if rel, _ := filepath.Rel(dir, p); rel != filepath.Join(checkpointsDir, "volumes", "r1") {
		t.Fatalf("checkpoint of app volumes at %s", rel)
	}
	if err := n.DropCheckpoint(checkpointsDir + "/volumes/r1"); err != nil {
		t.Fatal(err)
	}
	if err := n.DropCheckpoint("checkpoints/volumes"); err == nil {
		t.Fatal("dropped app checkpoints' volumes folder as a checkpoint")
	}
	if _, err := n.checkpointPath("checkpoints/checkpoints/r1"); err == nil {
		t.Fatal("a checkpoint in app checkpoints' folder accepted")
	}
	for _, p := range kept {
		if _, err := os.Stat(filepath.Join(dir, p)); err != nil {
			t.Errorf("%s after a start and a checkpoint's drop: %v", p, err)
		}
	}
}

// ckRuntime is a Runtime whose checkpoints always work.
type ckRuntime struct{ Runtime }

func (ckRuntime) CheckpointUsable(context.Context) error           { return nil }
func (ckRuntime) Checkpoint(context.Context, string, string) error { return nil }

// confineAll is a Confiner that is never called here.
type confineAll struct{ Confiner }

// Replicas confined to user namespaces of their own are checkpointable
// as unconfined ones are (the runtime dumps them from inside their
// network namespace, which CRIU then leaves alone).
func TestCheckpointUsableConfined(t *testing.T) {
	n := &Node{rt: ckRuntime{}, init: "/shoal-init"}
	if err := n.CheckpointUsable(context.Background()); err != nil {
		t.Fatalf("unconfined: %v", err)
	}
	n.confiner = confineAll{}
	if err := n.CheckpointUsable(context.Background()); err != nil {
		t.Fatalf("confined: %v", err)
	}
	n.init = ""
	if err := n.CheckpointUsable(context.Background()); !errors.Is(err, runtime.ErrNotCheckpointable) {
		t.Fatalf("without shoal-init's pipe: %v, want ErrNotCheckpointable", err)
	}
}
