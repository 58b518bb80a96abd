package cluster

import (
	"os"
	"path/filepath"
	"testing"
)

// TestPlaceWorkload places every replica of a small and a large workload:
// neither runs out of room, so the rate is of decisions that succeeded.
func TestPlaceWorkload(t *testing.T) {
	for _, w := range []placeWorkload{placeSmall, placeLarge} {
		v, err := w.run()
		if err != nil || !(v > 0) {
			t.Errorf("%+v: %v decisions/s, %v", w, v, err)
		}
	}
}

// TestLeaderPhases reads the lost replica and its replacement's start from
// a leader's log, in either order, and skips the app's first starts.
func TestLeaderPhases(t *testing.T) {
	log := `time=2026-11-24T23:50:28.916Z level=INFO msg="serving: start" app=heal-4 replica=heal-4-aa reason="scale out"
time=2026-11-24T23:50:28.917Z level=INFO msg="serving: start" app=heal-40 replica=heal-40-cc reason="scale out"
time=2026-11-24T23:50:31.640Z level=INFO msg="serving: start" app=heal-4 replica=heal-4-bb reason="scale out"
time=2026-11-24T23:50:31.641Z level=INFO msg="serving: lost" app=heal-4 replica=heal-4-aa reason="node n2 is lost"
`
	path := filepath.Join(t.TempDir(), "log")
	if err := os.WriteFile(path, []byte(log), 0o644); err != nil {
		t.Fatal(err)
	}
	lost, start, err := leaderPhases(path, "heal-4", map[string]bool{"heal-4-aa": true})
	if err != nil {
		t.Fatal(err)
	}
	if got := lost.Format("05.000"); got != "31.641" {
		t.Errorf("lost at %s, want 31.641", got)
	}
	if got := start.Format("05.000"); got != "31.640" {
		t.Errorf("start at %s, want 31.640", got)
	}
	if _, _, err := leaderPhases(path, "heal-40", map[string]bool{"heal-40-cc": true}); err == nil {
		t.Error("heal-40 has no replacement, yet no error")
	}
}
