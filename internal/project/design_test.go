package project

import (
	"bytes"
	"os"
	"path/filepath"
	"testing"
)

// designMaxLines is DESIGN.md's budget: a map read whole, not a manual.
const designMaxLines = 600

// TestDesignWithinItsLength holds DESIGN.md to its line budget, so the map
// stays short enough to be read before a change, and kept true with it.
func TestDesignWithinItsLength(t *testing.T) {
	b, err := os.ReadFile(filepath.Join("..", "..", "DESIGN.md"))
	if err != nil {
		t.Fatal(err)
	}
	n := bytes.Count(b, []byte("\n"))
	if len(b) > 0 && b[len(b)-1] != '\n' {
		n++
	}
	if n < 100 {
		t.Fatalf("DESIGN.md has %d lines: is it the project's map?", n)
	}
	if n > designMaxLines {
		t.Errorf("DESIGN.md has %d lines, over its budget of %d: say the same in fewer lines", n, designMaxLines)
	}
}
