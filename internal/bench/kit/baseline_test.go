package kit

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/shoal-run/shoal/internal/bench/benchtest"
)

func TestRuncBaseline(t *testing.T) {
	benchtest.NeedRoot(t, "runc")
	ctx := context.Background()
	dir := t.TempDir()
	rootfs := filepath.Join(dir, "rootfs")
	if err := MakeBusyboxRootfs(rootfs); err != nil {
		t.Fatal(err)
	}
	b, err := NewRunc(ctx, dir, rootfs, "runc", nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := b.Cleanup(context.Background()); err != nil {
			t.Error(err)
		}
	})
	times, err := b.Run(ctx, 1)
	if err != nil {
		t.Fatal(err)
	}
	if times[PhaseTotal] <= 0 {
		t.Errorf("run: %v", times)
	}
	times, err = b.Phases(ctx, 2)
	if err != nil {
		t.Fatal(err)
	}
	for _, ph := range []string{PhaseCreate, PhaseStart, PhaseExec, PhaseDelete, PhaseTotal} {
		if times[ph] <= 0 {
			t.Errorf("phase %s missing: %v", ph, times)
		}
	}
	// A container left behind (created, never started) is removed by cleanup.
	if err := b.Runc(ctx, "create", "--bundle", b.Bundle, b.ID(3)); err != nil {
		t.Fatal(err)
	}
	if err := b.Cleanup(ctx); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(b.Root); !os.IsNotExist(err) {
		t.Fatalf("state root %s still there: %v", b.Root, err)
	}
}

func TestPodmanBaseline(t *testing.T) {
	benchtest.NeedRoot(t, "podman", "runc")
	ctx := context.Background()
	rootfs := filepath.Join(t.TempDir(), "rootfs")
	if err := MakeBusyboxRootfs(rootfs); err != nil {
		t.Fatal(err)
	}
	p, err := NewPodman(rootfs, "runc")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { p.Cleanup(context.Background()) })
	times, err := p.Run(ctx, 1)
	if err != nil {
		t.Fatal(err)
	}
	if times[PhaseTotal] <= 0 {
		t.Errorf("run: %v", times)
	}
	if !strings.Contains(p.Command(), "--rootfs DIR /bin/true") {
		t.Errorf("command %q", p.Command())
	}
	if err := p.Cleanup(ctx); err != nil {
		t.Fatal(err)
	}
}
