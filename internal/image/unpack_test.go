package image

import (
	"archive/tar"
	"bytes"
	"context"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"golang.org/x/sys/unix"

	"github.com/shoal-run/shoal/internal/errdefs"
)

func unpackBytes(t *testing.T, b []byte, lim Limits) (string, unpackResult, error) {
	t.Helper()
	base := t.TempDir()
	dst := filepath.Join(base, "a", "b", "root")
	if err := os.MkdirAll(dst, 0o755); err != nil {
		t.Fatal(err)
	}
	res, err := unpackLayer(context.Background(), bytes.NewReader(b), dst, lim)
	return dst, res, err
}

func TestUnpackBasic(t *testing.T) {
	suid := entry{name: "bin/su", body: "x", typ: tar.TypeReg, mode: 0o4755}
	fifo := entry{name: "run/fifo", typ: tar.TypeFifo, mode: 0o600}
	b := makeTar(t, dir("etc/"), reg("etc/passwd", "root:x:0:0::/:/bin/sh\n"), suid,
		symlink("lib", "usr/lib"), symlink("abs", "/etc/passwd"), hardlink("etc/passwd2", "etc/passwd"),
		reg("deep/er/file", "implicit parents"), fifo)
	dst, res, err := unpackBytes(t, gz(t, b), DefaultLimits)
	if err != nil {
		t.Fatal(err)
	}
	if res.DiffID != digestOf(b) {
		t.Fatalf("diff ID %s, want %s", res.DiffID, digestOf(b))
	}
	if got, _ := os.ReadFile(filepath.Join(dst, "etc/passwd2")); string(got) != "root:x:0:0::/:/bin/sh\n" {
		t.Fatalf("hardlink content %q", got)
	}
	fi, err := os.Stat(filepath.Join(dst, "bin/su"))
	if err != nil || fi.Mode()&os.ModeSetuid == 0 {
		t.Fatalf("setuid lost: %v %v", fi.Mode(), err)
	}
	if l, _ := os.Readlink(filepath.Join(dst, "abs")); l != "/etc/passwd" {
		t.Fatalf("symlink %q", l)
	}
	if fi, err := os.Lstat(filepath.Join(dst, "run/fifo")); err != nil || fi.Mode()&os.ModeNamedPipe == 0 {
		t.Fatalf("fifo: %v %v", fi, err)
	}
	if _, err := os.Stat(filepath.Join(dst, "deep/er/file")); err != nil {
		t.Fatal(err)
	}
}

func TestUnpackWhiteouts(t *testing.T) {
	b := makeTar(t, dir("etc/"), reg("etc/.wh.motd", ""), dir("var/cache/"), reg("var/cache/.wh..wh..opq", ""),
		reg("var/cache/new", "n"), reg(".wh..wh.plnk", ""))
	dst, _, err := unpackBytes(t, b, DefaultLimits)
	if err != nil {
		t.Fatal(err)
	}
	var st unix.Stat_t
	if err := unix.Lstat(filepath.Join(dst, "etc/motd"), &st); err != nil {
		t.Fatal(err)
	}
	if st.Mode&unix.S_IFMT != unix.S_IFCHR || st.Rdev != 0 {
		t.Fatalf("whiteout mode %o rdev %d", st.Mode, st.Rdev)
	}
	if _, err := os.Lstat(filepath.Join(dst, "etc/.wh.motd")); !os.IsNotExist(err) {
		t.Fatalf(".wh. file kept: %v", err)
	}
	buf := make([]byte, 8)
	n, err := unix.Lgetxattr(filepath.Join(dst, "var/cache"), opaqueXattr, buf)
	if err != nil || string(buf[:n]) != "y" {
		t.Fatalf("opaque xattr %q %v", buf[:n], err)
	}
	if _, err := os.Lstat(filepath.Join(dst, "var/cache/.wh..wh..opq")); !os.IsNotExist(err) {
		t.Fatalf("opaque marker kept: %v", err)
	}
}

// TestUnpackRefused checks every escape and forbidden kind; the error names
// the entry and nothing lands outside the target.
func TestUnpackRefused(t *testing.T) {
	dev := entry{name: "srv/sda", typ: tar.TypeBlock, mode: 0o600}
	chr := entry{name: "etc/null", typ: tar.TypeChar, mode: 0o666}
	devNull := entry{name: "dev/null", typ: tar.TypeChar, mode: 0o666}
	cases := []struct {
		name    string
		entries []entry
		entry   string // named in the error
	}{
		{"dotdot", []entry{reg("../../etc/passwd", "x")}, "../../etc/passwd"},
		{"dotdot-inner", []entry{reg("a/../../x", "x")}, "a/../../x"},
		{"absolute", []entry{reg("/etc/passwd", "x")}, "/etc/passwd"},
		{"symlink-parent-abs", []entry{symlink("a", "/etc"), reg("a/passwd", "x")}, "a/passwd"},
		{"symlink-parent-rel", []entry{symlink("a", "../../.."), reg("a/escaped", "x")}, "a/escaped"},
		{"symlink-parent-deep", []entry{dir("d/"), symlink("d/up", "../.."), reg("d/up/x", "x")}, "d/up/x"},
		{"symlink-parent-dir", []entry{symlink("a", "/tmp"), dir("a/sub/")}, "a/sub/"},
		{"whiteout-through-symlink", []entry{symlink("a", "/etc"), reg("a/.wh.passwd", "")}, "a/.wh.passwd"},
		{"opaque-through-symlink", []entry{symlink("a", "/etc"), reg("a/.wh..wh..opq", "")}, "a/.wh..wh..opq"},
		{"hardlink-outside", []entry{hardlink("p", "../../etc/passwd")}, "p"},
		{"hardlink-absolute", []entry{hardlink("p", "/etc/passwd")}, "p"},
		{"hardlink-missing", []entry{hardlink("p", "nothing")}, "p"},
		{"hardlink-via-symlink", []entry{symlink("e", "/etc"), hardlink("p", "e/passwd")}, "p"},
		{"block-device", []entry{dev}, "srv/sda"},
		{"char-device", []entry{chr}, "etc/null"},
		{"device-top-dev", []entry{entry{name: "dev", typ: tar.TypeChar, mode: 0o666}}, "dev"},
		{"hardlink-to-skipped-device", []entry{devNull, hardlink("etc/null", "dev/null")}, "etc/null"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			dst, _, err := unpackBytes(t, makeTar(t, c.entries...), DefaultLimits)
			if err == nil {
				t.Fatal("unpacked")
			}
			t.Log(err)
			if !errors.Is(err, errdefs.ErrInvalid) || !strings.Contains(err.Error(), `entry "`+c.entry+`"`) {
				t.Fatalf("error %q does not name entry %q as invalid", err, c.entry)
			}
			// Nothing beside the target: its parent holds only it.
			ents, _ := os.ReadDir(filepath.Dir(dst))
			if len(ents) != 1 {
				t.Fatalf("written beside the target: %v", ents)
			}
		})
	}
}

func TestUnpackLimits(t *testing.T) {
	big := strings.Repeat("0", 1<<20)
	lim := Limits{MaxLayerBytes: 512 << 10, MaxEntries: 4, MaxFileBytes: 2 << 20}
	if _, _, err := unpackBytes(t, gz(t, makeTar(t, reg("bomb", big))), lim); err == nil ||
		!strings.Contains(err.Error(), `entry "bomb"`) || !strings.Contains(err.Error(), "limit") {
		t.Fatalf("size bomb: %v", err)
	}
	// A gzip bomb: a tiny compressed stream of zeros past the limit.
	zeros := gz(t, make([]byte, 4<<20))
	if _, _, err := unpackBytes(t, zeros, lim); err == nil || !strings.Contains(err.Error(), "limit") {
		t.Fatalf("gzip bomb: %v", err)
	}
	lim2 := Limits{MaxLayerBytes: 1 << 30, MaxEntries: 3, MaxFileBytes: 10}
	if _, _, err := unpackBytes(t, makeTar(t, reg("a", "1"), reg("b", "2"), reg("c", "3"), reg("d", "4")), lim2); err == nil ||
		!strings.Contains(err.Error(), `entry "d"`) {
		t.Fatalf("entry bomb: %v", err)
	}
	if _, _, err := unpackBytes(t, makeTar(t, reg("f", "12345678901")), lim2); err == nil ||
		!strings.Contains(err.Error(), `entry "f"`) {
		t.Fatalf("file limit: %v", err)
	}
}

func TestUnpackCorrupt(t *testing.T) {
	b := gz(t, makeTar(t, reg("a", strings.Repeat("x", 5000)), reg("b", "y")))
	if _, _, err := unpackBytes(t, b[:len(b)/2], DefaultLimits); err == nil {
		t.Fatal("truncated gzip unpacked")
	}
	raw := makeTar(t, reg("a", strings.Repeat("x", 5000)))
	if _, _, err := unpackBytes(t, raw[:2000], DefaultLimits); err == nil {
		t.Fatal("truncated tar unpacked")
	}
}
