package image

import (
	"context"
	"io/fs"
	"net"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"

	"github.com/shoal-run/shoal/internal/errdefs"
)

// awkwardPaths are paths a caller may name that are no build folder or
// image file: missing, under a file, a symlink loop, a FIFO (whose open
// would hang), a device and a socket. The value is what the error says.
func awkwardPaths(t *testing.T) map[string]string {
	t.Helper()
	d := t.TempDir()
	file := writeFile(t, filepath.Join(d, "file"), []byte("x"))
	fifo := filepath.Join(d, "fifo")
	if err := syscall.Mkfifo(fifo, 0o644); err != nil {
		t.Fatal(err)
	}
	loop := filepath.Join(d, "loop")
	if err := os.Symlink(loop, loop); err != nil {
		t.Fatal(err)
	}
	sock := filepath.Join(d, "sock")
	l, err := net.Listen("unix", sock)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { l.Close() })
	return map[string]string{
		filepath.Join(d, "missing"): "no such file",
		filepath.Join(file, "sub"):  "not a directory",
		loop:                        "too many levels of symbolic links",
		fifo:                        "named pipe",
		"/dev/null":                 "character device",
		sock:                        "socket",
	}
}

// TestAwkwardInputPaths: Build and Import refuse each awkward path as
// invalid input naming it, and leave the store as it was.
func TestAwkwardInputPaths(t *testing.T) {
	ctx := context.Background()
	s, before := seeded(t)
	ops := []struct {
		name, field string
		run         func(p string) error
	}{
		{"Build", "dir", func(p string) error { _, err := s.Build(ctx, p, BuildOptions{Tag: "a:1"}); return err }},
		{"Import", "path", func(p string) error { _, err := s.Import(ctx, p, "a:1"); return err }},
	}
	for p, want := range awkwardPaths(t) {
		for _, op := range ops {
			err := op.run(p)
			if !errdefs.IsInvalid(err) || errdefs.Field(err) != op.field {
				t.Errorf("%s(%s) = %v, want invalid %s", op.name, p, err, op.field)
				continue
			}
			if !strings.Contains(err.Error(), p) || !strings.Contains(err.Error(), want) {
				t.Errorf("%s(%s): error %q does not name the path and say %q", op.name, p, err, want)
			}
		}
	}
	assertUnchanged(t, s, before)
}

// TestImportFIFOInsideLayout: a layout whose index.json or blob is a FIFO is
// refused instead of hanging the import.
func TestImportFIFOInsideLayout(t *testing.T) {
	ctx := context.Background()
	s, before := seeded(t)
	for _, name := range []string{"index.json", "blob"} {
		layout := umociLayout(t)
		victim := filepath.Join(layout, "index.json")
		if name == "blob" {
			victim = biggestBlob(t, layout)
		}
		if err := os.Remove(victim); err != nil {
			t.Fatal(err)
		}
		if err := syscall.Mkfifo(victim, 0o644); err != nil {
			t.Fatal(err)
		}
		_, err := s.Import(ctx, layout, "")
		if !errdefs.IsInvalid(err) || !strings.Contains(err.Error(), "named pipe") {
			t.Errorf("layout with a FIFO %s: %v", name, err)
		}
		assertUnchanged(t, s, before)
	}
}

// TestBuildFIFOEntryKept: a FIFO inside the build folder is part of the
// image, never opened.
func TestBuildFIFOEntryKept(t *testing.T) {
	ctx := context.Background()
	s := newStore(t)
	d := buildDir(t)
	if err := syscall.Mkfifo(filepath.Join(d, "pipe"), 0o600); err != nil {
		t.Fatal(err)
	}
	img, err := s.Build(ctx, d, BuildOptions{Tag: "fifo:1"})
	if err != nil {
		t.Fatal(err)
	}
	fi, err := os.Lstat(filepath.Join(img.Layers[0], "pipe"))
	if err != nil || fi.Mode()&fs.ModeNamedPipe == 0 {
		t.Fatalf("FIFO in snapshot: %v %v", fi, err)
	}
}

// TestInputErrPermission: root passes every permission check, so the one
// errno a test cannot provoke here is classified directly.
func TestInputErrPermission(t *testing.T) {
	err := inputErr("path", &fs.PathError{Op: "open", Path: "/srv/x.tar", Err: syscall.EACCES})
	if !errdefs.IsInvalid(err) || errdefs.Field(err) != "path" || !strings.Contains(err.Error(), "/srv/x.tar") {
		t.Fatalf("EACCES: %v", err)
	}
	if err := inputErr("path", &fs.PathError{Op: "read", Path: "/x", Err: syscall.EIO}); errdefs.IsInvalid(err) {
		t.Fatalf("EIO is not the caller's: %v", err)
	}
}
