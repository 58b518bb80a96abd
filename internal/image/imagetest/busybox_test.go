package imagetest

import (
	"context"
	"log/slog"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/shoal-run/shoal/internal/image"
)

func TestBusybox(t *testing.T) {
	s, err := image.Open(t.TempDir(), image.WithLogger(slog.New(slog.DiscardHandler)))
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	img := Busybox(t, s, "busybox:test")
	if got, err := s.Get(context.Background(), "busybox:test"); err != nil || got.Digest != img.Digest {
		t.Fatalf("Get: %v", err)
	}
	root := img.Layers[0]
	if l, err := os.Readlink(filepath.Join(root, "bin", "sh")); err != nil || l != "busybox" {
		t.Fatalf("bin/sh -> %q (%v)", l, err)
	}
	b, err := os.ReadFile(filepath.Join(root, "etc", "passwd"))
	if err != nil || !strings.HasPrefix(string(b), "root:x:0:0:") {
		t.Fatalf("etc/passwd %q %v", b, err)
	}
	// The unpacked busybox runs.
	out, err := exec.Command(filepath.Join(root, "bin", "echo"), "hello").CombinedOutput()
	if err != nil || string(out) != "hello\n" {
		t.Fatalf("bin/echo: %q %v", out, err)
	}
}
