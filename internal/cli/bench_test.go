package cli

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

func TestFindBenchBinary(t *testing.T) {
	dir := t.TempDir()
	exe := filepath.Join(dir, "shoal")
	harness := filepath.Join(dir, "shoal-bench")

	_, err := findBenchBinary(exe)
	if err == nil || !strings.Contains(err.Error(), harness) || !strings.Contains(err.Error(), "make build") {
		t.Fatalf("missing harness: got %v, want an error naming %s and how to build it", err, harness)
	}
	if err := os.WriteFile(harness, []byte("#!/bin/sh\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	if _, err := findBenchBinary(exe); err == nil || !strings.Contains(err.Error(), "not an executable") {
		t.Fatalf("harness without x bit: got %v", err)
	}
	if err := os.Chmod(harness, 0o755); err != nil {
		t.Fatal(err)
	}
	got, err := findBenchBinary(exe)
	if err != nil || got != harness {
		t.Fatalf("findBenchBinary = %q, %v; want %q", got, err, harness)
	}
}

func TestBenchWithoutHarness(t *testing.T) {
	// The test binary has no shoal-bench next to it.
	var out, errOut strings.Builder
	if code := Main([]string{"bench", "lifecycle"}, &out, &errOut); code != 1 || !strings.Contains(errOut.String(), "shoal-bench") {
		t.Fatalf("exit %d, stderr %q: want 1 and the missing harness named", code, errOut.String())
	}
	out.Reset()
	errOut.Reset()
	if code := Main([]string{"bench", "--help"}, &out, &errOut); code != 0 || !strings.Contains(out.String(), "make build") || !strings.Contains(errOut.String(), "shoal-bench") {
		t.Fatalf("--help: exit %d, stdout %q, stderr %q", code, out.String(), errOut.String())
	}
}
