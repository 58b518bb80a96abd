package serving

import (
	"os"
	"path/filepath"
	"testing"
)

// removeAppDir removes an app's folder but for volumes holding something:
// an app without volumes leaves nothing, one with a volume only that.
func TestRemoveAppDir(t *testing.T) {
	for _, c := range []struct {
		name    string
		volume  bool // a volume with a file in it
		empty   bool // an empty volumes folder
		dirKept bool
	}{
		{name: "no volumes"},
		{name: "empty volumes folder", empty: true},
		{name: "a kept volume", volume: true, dirKept: true},
	} {
		dir := filepath.Join(t.TempDir(), "app")
		for _, d := range []string{"logs", "state"} {
			if err := os.MkdirAll(filepath.Join(dir, d), 0o755); err != nil {
				t.Fatal(err)
			}
		}
		if err := os.WriteFile(filepath.Join(dir, "logs", "a.log"), []byte("x"), 0o644); err != nil {
			t.Fatal(err)
		}
		if c.empty || c.volume {
			if err := os.MkdirAll(filepath.Join(dir, "volumes", "www"), 0o755); err != nil {
				t.Fatal(err)
			}
			if c.empty {
				os.Remove(filepath.Join(dir, "volumes", "www"))
			} else if err := os.WriteFile(filepath.Join(dir, "volumes", "www", "f"), []byte("kept"), 0o644); err != nil {
				t.Fatal(err)
			}
		}
		if err := removeAppDir(dir); err != nil {
			t.Fatalf("%s: %v", c.name, err)
		}
		_, err := os.Stat(dir)
		if kept := err == nil; kept != c.dirKept {
			t.Errorf("%s: folder kept %v, want %v", c.name, kept, c.dirKept)
		}
		if c.volume {
			if b, err := os.ReadFile(filepath.Join(dir, "volumes", "www", "f")); err != nil || string(b) != "kept" {
				t.Errorf("%s: volume file %q, %v", c.name, b, err)
			}
			if _, err := os.Stat(filepath.Join(dir, "logs")); err == nil {
				t.Errorf("%s: logs kept beside the volume", c.name)
			}
		}
	}
}
