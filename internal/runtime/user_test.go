package runtime

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"

	"github.com/shoal-run/shoal/internal/errdefs"
)

// TestResolveUserFiles covers account files that are not plain small files:
// a FIFO must not block, a huge file must not be read, and users that need no
// lookup must not care.
func TestResolveUserFiles(t *testing.T) {
	fifo := t.TempDir()
	_ = os.MkdirAll(filepath.Join(fifo, "etc"), 0o755)
	if err := syscall.Mkfifo(filepath.Join(fifo, "etc", "passwd"), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := syscall.Mkfifo(filepath.Join(fifo, "etc", "group"), 0o644); err != nil {
		t.Fatal(err)
	}
	_, err := resolveUser(fifo, "app")
	if errdefs.Field(err) != "user" || !strings.Contains(err.Error(), "/etc/passwd") || !strings.Contains(err.Error(), "not a regular file") {
		t.Fatalf("FIFO passwd: %v, want an invalid user naming /etc/passwd", err)
	}
	_, err = resolveUser(fifo, "1000:staff")
	if errdefs.Field(err) != "user" || !strings.Contains(err.Error(), "/etc/group") {
		t.Fatalf("FIFO group: %v, want an invalid user naming /etc/group", err)
	}
	for in, want := range map[string]user{
		"":          {Home: "/root"},
		"0":         {Home: "/root"},
		"0:5":       {GID: 5, Home: "/root"},
		"1000":      {UID: 1000},
		"1000:1000": {UID: 1000, GID: 1000},
	} {
		if got, err := resolveUser(fifo, in); err != nil || got.UID != want.UID || got.GID != want.GID || got.Home != want.Home || len(got.Groups) != 0 {
			t.Errorf("%q with FIFO files: %+v %v, want %+v", in, got, err, want)
		}
	}
	// No /etc at all: root and numeric users still resolve.
	empty := t.TempDir()
	if got, err := resolveUser(empty, ""); err != nil || got.UID != 0 || got.Home != "/root" {
		t.Fatalf("root without /etc/passwd: %+v %v", got, err)
	}
	if got, err := resolveUser(empty, "33:34"); err != nil || got.UID != 33 || got.GID != 34 {
		t.Fatalf("33:34 without /etc/passwd: %+v %v", got, err)
	}
	// A file above the limit is refused without being read into memory.
	big := t.TempDir()
	_ = os.MkdirAll(filepath.Join(big, "etc"), 0o755)
	f, err := os.Create(filepath.Join(big, "etc", "passwd"))
	if err != nil {
		t.Fatal(err)
	}
	if err := f.Truncate(1 << 40); err != nil {
		t.Fatal(err)
	}
	f.Close()
	if _, err := resolveUser(big, "app"); errdefs.Field(err) != "user" || !strings.Contains(err.Error(), "above the limit") {
		t.Fatalf("huge passwd: %v", err)
	}
	// A directory is not an account file either.
	dir := t.TempDir()
	_ = os.MkdirAll(filepath.Join(dir, "etc", "passwd"), 0o755)
	if _, err := resolveUser(dir, "app"); errdefs.Field(err) != "user" || !strings.Contains(err.Error(), "/etc/passwd") {
		t.Fatalf("directory passwd: %v", err)
	}
}

// TestUserFIFOLayer runs containers on an image layer whose /etc/passwd is a
// FIFO: they are refused with an error naming the file, and create does not
// hang in open(2). Numeric users and root run on an image without
// /etc/passwd.
func TestUserFIFOLayer(t *testing.T) {
	r := newTestRuntime(t, nil)
	top := t.TempDir()
	_ = os.MkdirAll(filepath.Join(top, "etc"), 0o755)
	if err := syscall.Mkfifo(filepath.Join(top, "etc", "passwd"), 0o644); err != nil {
		t.Fatal(err)
	}
	layers := []string{busyboxLayer(t), top}
	s := baseSpec(t, "id", "-u")
	s.Layers, s.User = layers, "app"
	_, err := r.Run(context.Background(), s)
	if !errdefs.IsInvalid(err) || errdefs.Field(err) != "user" || !strings.Contains(err.Error(), "/etc/passwd") {
		t.Fatalf("named user over a FIFO passwd: %v", err)
	}
	assertGone(t, r, s.ID)

	// The runtime's own init opens /etc/passwd for every user, numeric ones
	// included, and would block on the FIFO: refused up front as well.
	n := baseSpec(t, "id", "-u")
	n.Layers, n.User = layers, "1000:50"
	_, err = r.Run(context.Background(), n)
	if !errdefs.IsInvalid(err) || !strings.Contains(err.Error(), "/etc/passwd") || !strings.Contains(err.Error(), "FIFO") {
		t.Fatalf("numeric user over a FIFO passwd: %v", err)
	}
	assertGone(t, r, n.ID)

	// No /etc/passwd at all (a whiteout hides the busybox layer's).
	gone := t.TempDir()
	_ = os.MkdirAll(filepath.Join(gone, "etc"), 0o755)
	for _, f := range []string{"passwd", "group"} {
		if err := syscall.Mknod(filepath.Join(gone, "etc", f), syscall.S_IFCHR, 0); err != nil {
			t.Fatal(err)
		}
	}
	w := baseSpec(t, "sh", "-c", `id -u; echo $HOME; test -e /etc/passwd || echo no-passwd`)
	w.Layers, w.User = []string{busyboxLayer(t), gone}, "1234"
	st, out, errOut := capture(t, r, w)
	if st.Code != 0 || out != "1234\n/\nno-passwd\n" {
		t.Fatalf("numeric user without /etc/passwd: %+v %q %q", st, out, errOut)
	}
	root := baseSpec(t, "sh", "-c", `id -u; echo $HOME`)
	root.Layers = w.Layers
	if st, out, errOut = capture(t, r, root); st.Code != 0 || out != "0\n/root\n" {
		t.Fatalf("root without /etc/passwd: %+v %q %q", st, out, errOut)
	}
}

func TestCheckAccountFiles(t *testing.T) {
	mk := func(setup func(etc string) error) string {
		root := t.TempDir()
		etc := filepath.Join(root, "etc")
		if err := os.MkdirAll(etc, 0o755); err != nil {
			t.Fatal(err)
		}
		if err := setup(etc); err != nil {
			t.Fatal(err)
		}
		return root
	}
	tests := []struct {
		name  string
		setup func(etc string) error
		want  string // "" = accepted
	}{
		{"missing", func(string) error { return nil }, ""},
		{"regular", func(etc string) error { return os.WriteFile(filepath.Join(etc, "group"), []byte("root:x:0:\n"), 0o644) }, ""},
		{"link inside", func(etc string) error {
			_ = os.WriteFile(filepath.Join(etc, "passwd.real"), nil, 0o644)
			return os.Symlink("passwd.real", filepath.Join(etc, "passwd"))
		}, ""},
		{"fifo", func(etc string) error { return syscall.Mkfifo(filepath.Join(etc, "group"), 0o644) }, "/etc/group is not a regular file (a FIFO)"},
		{"directory", func(etc string) error { return os.Mkdir(filepath.Join(etc, "passwd"), 0o755) }, "/etc/passwd is not a regular file (a directory)"},
		{"link to the container's /dev", func(etc string) error { return os.Symlink("/dev/random", filepath.Join(etc, "passwd")) }, "/etc/passwd is a link to nothing"},
	}
	for _, tc := range tests {
		err := checkAccountFiles(mk(tc.setup))
		switch {
		case tc.want == "" && err != nil:
			t.Errorf("%s: %v", tc.name, err)
		case tc.want != "" && (!errdefs.IsInvalid(err) || !strings.Contains(err.Error(), tc.want)):
			t.Errorf("%s: %v, want an invalid error with %q", tc.name, err, tc.want)
		}
	}
}
