package image

import (
	"archive/tar"
	"context"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"

	"github.com/shoal-run/shoal/internal/errdefs"
)

func charDev(name string) entry  { return entry{name: name, typ: tar.TypeChar, mode: 0o666} }
func blockDev(name string) entry { return entry{name: name, typ: tar.TypeBlock, mode: 0o660} }

// debootstrapTar is the start of a root file system as mmdebstrap and
// debootstrap make it: device nodes under dev/.
func debootstrapTar(t *testing.T, more ...entry) []byte {
	return makeTar(t, append([]entry{
		dir("./"), dir("./dev/"), charDev("./dev/null"), charDev("./dev/zero"), charDev("./dev/tty"),
		dir("./dev/pts/"), charDev("./dev/pts/ptmx"), hardlink("./dev/null2", "./dev/null"),
		dir("./etc/"), reg("./etc/hostname", "deb\n"),
	}, more...)...)
}

// TestImportRootfsSkipsDevNodes: a plain mmdebstrap/debootstrap tarball is
// imported, its device nodes under dev/ left out with a note.
func TestImportRootfsSkipsDevNodes(t *testing.T) {
	s := newStore(t)
	p := writeFile(t, filepath.Join(t.TempDir(), "bookworm.tar"), debootstrapTar(t))
	imgs, err := s.Import(context.Background(), p, "deb:12")
	if err != nil {
		t.Fatal(err)
	}
	img := imgs[0]
	if len(img.Notes) != 1 || !strings.Contains(img.Notes[0], "5 device nodes under dev/ skipped") {
		t.Fatalf("notes %q", img.Notes)
	}
	root := img.Layers[0]
	if fi, err := os.Lstat(filepath.Join(root, "dev", "pts")); err != nil || !fi.IsDir() {
		t.Fatalf("dev/pts: %v %v", fi, err)
	}
	for _, n := range []string{"dev/null", "dev/zero", "dev/null2", "dev/pts/ptmx"} {
		if _, err := os.Lstat(filepath.Join(root, n)); !os.IsNotExist(err) {
			t.Errorf("%s kept: %v", n, err)
		}
	}
	if b, err := os.ReadFile(filepath.Join(root, "etc", "hostname")); err != nil || string(b) != "deb\n" {
		t.Fatalf("etc/hostname %q %v", b, err)
	}
	// The note is for the import that skipped them, not the stored image.
	if got, err := s.Get(context.Background(), "deb:12"); err != nil || got.Notes != nil {
		t.Fatalf("Get: %+v %v", got, err)
	}
}

// TestImportRootfsDeviceElsewhereEarly: a device node outside dev/ is refused
// by name as soon as the tar's first pass reaches it: what follows it is
// never read (here it is not even a tar).
func TestImportRootfsDeviceElsewhereEarly(t *testing.T) {
	s, before := seeded(t)
	b := debootstrapTar(t, blockDev("./srv/disk0"), reg("./etc/late", "x"))
	b = append(b[:len(b)-1024], []byte(strings.Repeat("not a tar header ", 200))...)
	p := writeFile(t, filepath.Join(t.TempDir(), "rootfs.tar"), b)
	imgs, err := s.Import(context.Background(), p, "deb:12")
	if err == nil {
		t.Fatalf("imported %+v", imgs)
	}
	if !errors.Is(err, errdefs.ErrInvalid) || !strings.Contains(err.Error(), `entry "./srv/disk0": device nodes are not allowed`) {
		t.Fatalf("error %q does not refuse srv/disk0 as a device node", err)
	}
	assertUnchanged(t, s, before)
}

// TestBuildRootfsDirSkipsDevNodes: a debootstrap root file system built from
// its folder has its device nodes under dev/ left out with a note, as its
// tarball's import does; one elsewhere is refused by name.
func TestBuildRootfsDirSkipsDevNodes(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Fatal("making device nodes needs root")
	}
	s := newStore(t)
	dir := t.TempDir()
	for _, d := range []string{"dev/pts", "etc"} {
		if err := os.MkdirAll(filepath.Join(dir, d), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.WriteFile(filepath.Join(dir, "etc", "hostname"), []byte("deb\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	for _, n := range []string{"dev/null", "dev/pts/ptmx"} {
		if err := syscall.Mknod(filepath.Join(dir, n), syscall.S_IFCHR|0o666, 1<<8|3); err != nil {
			t.Fatal(err)
		}
	}
	img, err := s.Build(context.Background(), dir, BuildOptions{Tag: "deb:12"})
	if err != nil {
		t.Fatalf("build: %v", err)
	}
	if len(img.Notes) != 1 || !strings.Contains(img.Notes[0], "2 device nodes under dev/ skipped") {
		t.Fatalf("notes %q", img.Notes)
	}
	root := img.Layers[0]
	if _, err := os.Lstat(filepath.Join(root, "dev", "null")); !os.IsNotExist(err) {
		t.Errorf("dev/null kept: %v", err)
	}
	if b, err := os.ReadFile(filepath.Join(root, "etc", "hostname")); err != nil || string(b) != "deb\n" {
		t.Fatalf("etc/hostname %q %v", b, err)
	}
	if err := syscall.Mknod(filepath.Join(dir, "etc", "disk0"), syscall.S_IFBLK|0o660, 7<<8); err != nil {
		t.Fatal(err)
	}
	if _, err := s.Build(context.Background(), dir, BuildOptions{Tag: "deb:13"}); err == nil ||
		!errors.Is(err, errdefs.ErrInvalid) || !strings.Contains(err.Error(), `"etc/disk0": device nodes cannot go into an image`) {
		t.Fatalf("build with etc/disk0: %v; want it refused by name", err)
	}
}
