package image

import (
	"context"
	"log/slog"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"golang.org/x/sys/unix"
)

// openParent returns a fresh directory every user may enter, so that only
// the store's own modes decide what another user reaches below it.
func openParent(t *testing.T) string {
	t.Helper()
	d, err := os.MkdirTemp("", "shoal-perm-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(d) })
	if err := os.Chmod(d, 0o755); err != nil {
		t.Fatal(err)
	}
	return d
}

// asNobody runs a command as uid and gid 65534 with no groups.
func asNobody(t *testing.T, args ...string) (string, error) {
	t.Helper()
	if _, err := exec.LookPath("setpriv"); err != nil {
		t.Fatalf("setpriv (util-linux) is needed: %v", err)
	}
	if os.Geteuid() != 0 {
		t.Fatal("changing to another user needs root")
	}
	args = append([]string{"--reuid=65534", "--regid=65534", "--clear-groups"}, args...)
	out, err := exec.Command("setpriv", args...).CombinedOutput()
	return string(out), err
}

func checkMode(t *testing.T, p string, want os.FileMode) {
	t.Helper()
	fi, err := os.Stat(p)
	if err != nil {
		t.Fatal(err)
	}
	if got := fi.Mode().Perm(); got != want {
		t.Errorf("%s: mode %o, want %o", p, got, want)
	}
}

// TestStoreClosedToOtherUsers: an untrusted image's setuid binary in a
// snapshot is out of reach of every user but root.
func TestStoreClosedToOtherUsers(t *testing.T) {
	ctx := context.Background()
	parent := openParent(t)
	root := filepath.Join(parent, "images")
	s, err := Open(root, WithLogger(slog.New(slog.DiscardHandler)))
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()

	src := t.TempDir()
	suid := filepath.Join(src, "suid")
	b, err := os.ReadFile("/usr/bin/busybox")
	if err != nil {
		t.Fatalf("busybox-static is needed: %v", err)
	}
	writeFile(t, suid, b)
	if err := os.Chmod(suid, os.ModeSetuid|0o755); err != nil {
		t.Fatal(err)
	}
	writeFile(t, filepath.Join(src, "hello"), []byte("hello\n"))
	img, err := s.Build(ctx, src, BuildOptions{Tag: "suid:1"})
	if err != nil {
		t.Fatal(err)
	}
	for _, d := range []string{root, filepath.Join(root, "blobs"), s.blobDir(), s.snapDir(), s.tmpDir()} {
		checkMode(t, d, 0o700)
	}
	inSnap := filepath.Join(img.Layers[0], "suid")
	fi, err := os.Stat(inSnap)
	if err != nil || fi.Mode()&os.ModeSetuid == 0 {
		t.Fatalf("snapshot lost the image's setuid bit: %v %v", fi, err)
	}

	// The harness itself works: nobody may list the open parent.
	if out, err := asNobody(t, "ls", parent); err != nil {
		t.Fatalf("nobody cannot list %s, so the checks below prove nothing: %v\n%s", parent, err, out)
	}
	for _, args := range [][]string{
		{"ls", s.snapDir()},
		{"ls", s.blobDir()},
		// Through a shell: setpriv itself still holds root's capabilities
		// while it resolves the program it runs.
		{"/bin/sh", "-c", `exec "$0" true`, inSnap},
	} {
		out, err := asNobody(t, args...)
		if err == nil || !strings.Contains(out, "ermission denied") {
			t.Errorf("nobody ran %v: %v\n%s", args, err, out)
		}
	}

	// A container's processes see the image through its overlay mount,
	// whatever their user: the closed store does not get in their way.
	mnt, empty := filepath.Join(parent, "rootfs"), filepath.Join(parent, "empty")
	for _, d := range []string{mnt, empty} {
		if err := os.Mkdir(d, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	// Without an upper layer overlayfs wants two lower ones.
	if err := unix.Mount("overlay", mnt, "overlay", unix.MS_RDONLY, "lowerdir="+img.Layers[0]+":"+empty); err != nil {
		t.Fatalf("mount overlay (needs root): %v", err)
	}
	defer unix.Unmount(mnt, unix.MNT_DETACH)
	if out, err := asNobody(t, "cat", filepath.Join(mnt, "hello")); err != nil || out != "hello\n" {
		t.Fatalf("nobody reading the image through overlay: %v\n%s", err, out)
	}
}

// TestOpenNarrowsModes: a store made with open modes is closed at Open.
func TestOpenNarrowsModes(t *testing.T) {
	s := newStore(t)
	s.Close()
	dirs := []string{s.Root(), filepath.Join(s.Root(), "blobs"), s.blobDir(), s.snapDir(), s.tmpDir()}
	for _, d := range dirs {
		if err := os.Chmod(d, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	reopen(t, s)
	for _, d := range dirs {
		checkMode(t, d, 0o700)
	}
}
