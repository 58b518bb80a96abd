package bench

import (
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

// needRoot fails the test when it cannot run the real container tools.
func needRoot(t *testing.T, tools ...string) {
	t.Helper()
	if os.Geteuid() != 0 {
		t.Fatal("needs root to run containers")
	}
	for _, tool := range tools {
		if _, err := exec.LookPath(tool); err != nil {
			t.Fatalf("needs %s: %v", tool, err)
		}
	}
}

func TestRuncBaseline(t *testing.T) {
	needRoot(t, "runc")
	ctx := context.Background()
	dir := t.TempDir()
	rootfs := filepath.Join(dir, "rootfs")
	if err := MakeBusyboxRootfs(rootfs); err != nil {
		t.Fatal(err)
	}
	b, err := newRuncBaseline(ctx, dir, rootfs, "runc", nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := b.cleanup(context.Background()); err != nil {
			t.Error(err)
		}
	})
	times, err := b.run(ctx, 1)
	if err != nil {
		t.Fatal(err)
	}
	if times[phaseTotal] <= 0 {
		t.Errorf("run: %v", times)
	}
	times, err = b.phases(ctx, 2)
	if err != nil {
		t.Fatal(err)
	}
	for _, ph := range []string{phaseCreate, phaseStart, phaseExec, phaseDelete, phaseTotal} {
		if times[ph] <= 0 {
			t.Errorf("phase %s missing: %v", ph, times)
		}
	}
	// A container left behind (created, never started) is removed by cleanup.
	if err := b.runc(ctx, "create", "--bundle", b.bundle, b.id(3)); err != nil {
		t.Fatal(err)
	}
	if err := b.cleanup(ctx); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(b.root); !os.IsNotExist(err) {
		t.Fatalf("state root %s still there: %v", b.root, err)
	}
}

func TestPodmanBaseline(t *testing.T) {
	needRoot(t, "podman", "runc")
	ctx := context.Background()
	rootfs := filepath.Join(t.TempDir(), "rootfs")
	if err := MakeBusyboxRootfs(rootfs); err != nil {
		t.Fatal(err)
	}
	p, err := newPodmanBaseline(rootfs, "runc")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { p.cleanup(context.Background()) })
	times, err := p.run(ctx, 1)
	if err != nil {
		t.Fatal(err)
	}
	if times[phaseTotal] <= 0 {
		t.Errorf("run: %v", times)
	}
	if !strings.Contains(p.command(), "--rootfs DIR /bin/true") {
		t.Errorf("command %q", p.command())
	}
	if err := p.cleanup(ctx); err != nil {
		t.Fatal(err)
	}
}
