package main

import (
	"context"
	"strings"
	"testing"
)

// TestSuites checks that every suite is built in, in the order of `shoal
// bench all`.
func TestSuites(t *testing.T) {
	got := strings.Join(suiteNames(), ",")
	if want := "lifecycle,serving,resilience,jobs,storage,host,cluster,density,fastcontainer,selfscale,stateful"; got != want {
		t.Errorf("suites = %s, want %s", got, want)
	}
}

func TestUsageErrors(t *testing.T) {
	for _, args := range [][]string{nil, {"nosuch"}, {"lifecycle", "--bad"}, {"lifecycle", "--runs", "-1"}, {"a", "b"}} {
		var out, errOut strings.Builder
		if code := run(context.Background(), args, &out, &errOut); code != 2 {
			t.Errorf("shoal bench %q: exit %d, want 2 (stderr %q)", args, code, errOut.String())
		}
	}
	var out, errOut strings.Builder
	if code := run(context.Background(), []string{"--help"}, &out, &errOut); code != 0 || !strings.Contains(out.String(), "selfscale") {
		t.Errorf("--help: exit %d, stdout %q", code, out.String())
	}
}
