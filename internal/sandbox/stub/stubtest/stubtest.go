// Package stubtest builds shoal-init (cmd/shoal-init, a C program) for
// tests, as `make build` does.
package stubtest

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
)

// Source is the path of shoal-init's source.
func Source() string {
	_, here, _, _ := runtime.Caller(0)
	return filepath.Join(filepath.Dir(here), "..", "..", "..", "..", "cmd", "shoal-init", "shoal-init.c")
}

// Build compiles shoal-init to dst with the flags of the Makefile.
func Build(dst string) error {
	cc := os.Getenv("CC")
	if cc == "" {
		cc = "cc"
	}
	out, err := exec.Command(cc, "-static", "-O2", "-Wall", "-Wextra", "-Werror", "-o", dst, Source()).CombinedOutput()
	if err != nil {
		return fmt.Errorf("build shoal-init (%s): %w\n%s", Source(), err, out)
	}
	return nil
}
