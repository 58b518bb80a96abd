package types

import (
	"os/exec"
	"strings"
	"testing"
)

// The wire types are shared by the CLI and the daemon: they import the
// standard library only, and no HTTP, so that a client of the format pays
// for neither the server nor a service.
func TestDepsHaveNoHTTP(t *testing.T) {
	out, err := exec.Command("go", "list", "-deps", "-f", "{{.ImportPath}} {{.Standard}}", ".").Output()
	if err != nil {
		t.Fatalf("go list -deps: %v", err)
	}
	const self = "github.com/shoal-run/shoal/internal/api/types"
	seen := 0
	for _, line := range strings.Split(strings.TrimSpace(string(out)), "\n") {
		path, std, _ := strings.Cut(line, " ")
		seen++
		switch {
		case path == self:
		case path == "net/http" || strings.HasPrefix(path, "net/http/"):
			t.Errorf("package types depends on %s", path)
		case std != "true":
			t.Errorf("package types depends on %s, outside the standard library", path)
		}
	}
	if seen < 2 {
		t.Fatalf("go list -deps listed %d packages: %q", seen, out)
	}
}
