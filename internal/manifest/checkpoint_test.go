package manifest

import (
	"strings"
	"testing"
)

// TestScaleCheckpoint: [scale] checkpoint is on unless set false, and a
// value that is not a boolean is refused naming the key.
func TestScaleCheckpoint(t *testing.T) {
	base := "name = \"a\"\nimage = \"x:1\"\n[scale]\n"
	for _, c := range []struct {
		line string
		on   bool
	}{{"", true}, {"checkpoint = true", true}, {"checkpoint = false", false}} {
		cfg, err := Parse([]byte(base+c.line+"\n"), "shoal.toml")
		if err != nil {
			t.Fatalf("%q: %v", c.line, err)
		}
		if got := cfg.Scale.CheckpointOn(); got != c.on {
			t.Errorf("%q: CheckpointOn %v, want %v", c.line, got, c.on)
		}
	}
	_, err := Parse([]byte(base+"checkpoint = \"no\"\n"), "shoal.toml")
	if err == nil || !strings.Contains(err.Error(), "checkpoint") {
		t.Fatalf("checkpoint = \"no\": %v, want an error naming checkpoint", err)
	}
}
