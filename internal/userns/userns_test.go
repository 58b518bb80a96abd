package userns

import (
	"context"
	"os"
	"path/filepath"
	"testing"

	"golang.org/x/sys/unix"

	"github.com/shoal-run/shoal/internal/mountinfo"
	"github.com/shoal-run/shoal/internal/runtime"
	"github.com/shoal-run/shoal/internal/store"
)

const testHost = Base + 7*Size

func needRoot(t *testing.T) {
	t.Helper()
	if os.Geteuid() != 0 {
		t.Fatal("needs root (user namespaces, idmapped mounts)")
	}
}

// layerDir makes a layer: a file of root's, one of www-data's (33), a
// setuid file, an overlay whiteout and an opaque directory.
func layerDir(t *testing.T) string {
	t.Helper()
	dir := filepath.Join(t.TempDir(), "layer")
	for _, d := range []string{"etc", "opaque"} {
		if err := os.MkdirAll(filepath.Join(dir, d), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	for name, uid := range map[string]int{"etc/root": 0, "etc/www": 33, "etc/suid": 0} {
		p := filepath.Join(dir, name)
		if err := os.WriteFile(p, []byte(name), 0o644); err != nil {
			t.Fatal(err)
		}
		if err := os.Chown(p, uid, uid); err != nil {
			t.Fatal(err)
		}
	}
	if err := unix.Chmod(filepath.Join(dir, "etc/suid"), 0o4755); err != nil {
		t.Fatal(err)
	}
	if err := unix.Mknod(filepath.Join(dir, "gone"), unix.S_IFCHR, 0); err != nil {
		t.Fatal(err)
	}
	if err := unix.Setxattr(filepath.Join(dir, "opaque"), "trusted.overlay.opaque", []byte("y"), 0); err != nil {
		t.Fatal(err)
	}
	return dir
}

func owner(t *testing.T, p string) (uint32, uint32, uint32) {
	t.Helper()
	var st unix.Stat_t
	if err := unix.Lstat(p, &st); err != nil {
		t.Fatal(err)
	}
	return st.Uid, st.Gid, st.Mode
}

// TestIdmappedLayer: a layer is mounted idmapped onto the range, owners
// shifted, nothing copied; a mount something removed is made again.
func TestIdmappedLayer(t *testing.T) {
	needRoot(t)
	src := layerDir(t)
	base := t.TempDir()
	l := &layers{mountDir: filepath.Join(base, "m"), copyDir: filepath.Join(base, "c")}
	t.Cleanup(func() { l.unmountAll() })
	check := func() string {
		t.Helper()
		out, err := l.mapped([]string{src}, testHost)
		if err != nil {
			t.Fatal(err)
		}
		if u, g, _ := owner(t, filepath.Join(out[0], "etc/root")); u != testHost || g != testHost {
			t.Fatalf("root's file shows as %d:%d, want %d", u, g, testHost)
		}
		if u, _, _ := owner(t, filepath.Join(out[0], "etc/www")); u != testHost+33 {
			t.Fatalf("www-data's file shows as %d, want %d", u, testHost+33)
		}
		return out[0]
	}
	mp := check()
	if mps, _ := mountinfo.MountsUnder(mp); len(mps) != 1 {
		t.Fatalf("mounts at %s: %v", mp, mps)
	}
	if u, _, _ := owner(t, filepath.Join(src, "etc/root")); u != 0 {
		t.Fatalf("the layer itself changed owner: %d", u)
	}
	if _, err := os.Stat(filepath.Join(base, "c")); !os.IsNotExist(err) {
		t.Fatalf("a copy was made: %v", err)
	}
	// Removed behind the daemon's back: made again.
	if err := l.unmountAll(); err != nil {
		t.Fatal(err)
	}
	if mp2 := check(); mp2 != mp {
		t.Fatalf("mounted again at %s, first at %s", mp2, mp)
	}
	if err := l.drop(testHost); err != nil {
		t.Fatal(err)
	}
	if mps, _ := mountinfo.MountsUnder(l.mountDir); len(mps) != 0 {
		t.Fatalf("mounts left after drop: %v", mps)
	}
}

// TestShiftedCopy: where layers are copied, the copy's owners are shifted
// into the range with set-id bits, whiteouts and opaque directories kept,
// and it is made once.
func TestShiftedCopy(t *testing.T) {
	needRoot(t)
	src := layerDir(t)
	base := t.TempDir()
	l := &layers{mountDir: filepath.Join(base, "m"), copyDir: filepath.Join(base, "c"), copy: true}
	out, err := l.mapped([]string{src}, testHost)
	if err != nil {
		t.Fatal(err)
	}
	c := out[0]
	if u, g, _ := owner(t, filepath.Join(c, "etc/root")); u != testHost || g != testHost {
		t.Fatalf("root's file copied as %d:%d", u, g)
	}
	if u, _, _ := owner(t, filepath.Join(c, "etc/www")); u != testHost+33 {
		t.Fatalf("www-data's file copied as %d", u)
	}
	if _, _, m := owner(t, filepath.Join(c, "etc/suid")); m&unix.S_ISUID == 0 {
		t.Fatalf("setuid bit lost: %o", m)
	}
	if _, _, m := owner(t, filepath.Join(c, "gone")); m&unix.S_IFMT != unix.S_IFCHR {
		t.Fatalf("whiteout copied as mode %o", m)
	}
	buf := make([]byte, 4)
	if n, err := unix.Getxattr(filepath.Join(c, "opaque"), "trusted.overlay.opaque", buf); err != nil || string(buf[:n]) != "y" {
		t.Fatalf("opaque directory: %q %v", buf[:n], err)
	}
	var before, after unix.Stat_t
	unix.Stat(filepath.Join(c, "etc/root"), &before)
	if _, err := l.mapped([]string{src}, testHost); err != nil {
		t.Fatal(err)
	}
	unix.Stat(filepath.Join(c, "etc/root"), &after)
	if before.Ino != after.Ino {
		t.Fatal("the copy was made again")
	}
	if mps, _ := mountinfo.MountsUnder(l.mountDir); len(mps) != 0 {
		t.Fatalf("mounts made though layers are copied: %v", mps)
	}
}

// TestOwnVolume: a volume of the host root's becomes the range's, owners
// shifted; one already the range's is left alone.
func TestOwnVolume(t *testing.T) {
	needRoot(t)
	dir := layerDir(t)
	if err := Own(dir, testHost); err != nil {
		t.Fatal(err)
	}
	if u, _, _ := owner(t, dir); u != testHost {
		t.Fatalf("volume owned by %d", u)
	}
	if u, _, _ := owner(t, filepath.Join(dir, "etc/www")); u != testHost+33 {
		t.Fatalf("www-data's file owned by %d", u)
	}
	if err := os.Chown(filepath.Join(dir, "etc/root"), 0, 0); err != nil {
		t.Fatal(err)
	}
	if err := Own(dir, testHost); err != nil {
		t.Fatal(err)
	}
	if u, _, _ := owner(t, filepath.Join(dir, "etc/root")); u != 0 {
		t.Fatal("a volume already the range's was walked again")
	}
}

// TestOwnKeptVolume: a volume of another range (kept from an app deleted,
// its range given back, then deployed again on a new one) keeps each
// file's id in its new range, and a root already in the range but not
// the range root's (a volume given to the image's user) is left alone.
func TestOwnKeptVolume(t *testing.T) {
	needRoot(t)
	dir := layerDir(t)
	old := uint32(testHost + 5*Size)
	if err := Shift(dir, old); err != nil {
		t.Fatal(err)
	}
	if err := Own(dir, testHost); err != nil {
		t.Fatal(err)
	}
	if u, _, _ := owner(t, filepath.Join(dir, "etc/www")); u != testHost+33 {
		t.Fatalf("www-data's file of the old range owned by %d, want %d", u, testHost+33)
	}
	if err := os.Lchown(dir, testHost+65534, testHost+65534); err != nil {
		t.Fatal(err)
	}
	if err := os.Chown(filepath.Join(dir, "etc/root"), 0, 0); err != nil {
		t.Fatal(err)
	}
	if err := Own(dir, testHost); err != nil {
		t.Fatal(err)
	}
	if u, _, _ := owner(t, filepath.Join(dir, "etc/root")); u != 0 {
		t.Fatal("a volume whose root is the range's was walked again")
	}
	if Unshift(testHost+7) != 7 || Unshift(Base+3*Size+9) != 9 || Unshift(33) != 33 {
		t.Fatal("Unshift")
	}
}

// TestRangeStable: an app's range is the one claimed in the store, the
// same for a second confiner on the store (a restarted daemon), and free
// again once released.
func TestRangeStable(t *testing.T) {
	needRoot(t)
	st, err := store.OpenBolt(filepath.Join(t.TempDir(), "store.db"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { st.Close() })
	ctx := context.Background()
	open := func() *Confiner {
		c, err := Open(Options{Store: st, MountDir: filepath.Join(t.TempDir(), "m"), CopyDir: filepath.Join(t.TempDir(), "c")})
		if err != nil {
			t.Fatal(err)
		}
		return c
	}
	c1 := open()
	a, _ := c1.Range(ctx, "a")
	b, _ := c1.Range(ctx, "b")
	if a.HostID != Base || b.HostID != Base+Size || a.Size != Size {
		t.Fatalf("ranges a=%+v b=%+v", a, b)
	}
	c2 := open()
	if b2, _ := c2.Range(ctx, "b"); b2 != b {
		t.Fatalf("b after a restart: %+v, before %+v", b2, b)
	}
	if err := c2.Release(ctx, "a"); err != nil {
		t.Fatal(err)
	}
	if c, _ := c2.Range(ctx, "c"); c.HostID != Base {
		t.Fatalf("c after a's release: %+v", c)
	}
}

// TestConfineAfterClose: a replica confined while the daemon stops, after
// Close unmounted the layers, is refused rather than given a layer
// mounted again, which nothing would unmount.
func TestConfineAfterClose(t *testing.T) {
	needRoot(t)
	st, err := store.OpenBolt(filepath.Join(t.TempDir(), "store.db"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { st.Close() })
	src := layerDir(t)
	c, err := Open(Options{Store: st, MountDir: filepath.Join(t.TempDir(), "m"), CopyDir: filepath.Join(t.TempDir(), "c")})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.layers.unmountAll() })
	if c.Copies() {
		t.Fatal("idmapped mounts refused on this host: the test needs them")
	}
	ctx := context.Background()
	spec := &runtime.Spec{Layers: []string{src}}
	if err := c.Confine(ctx, "a", spec); err != nil {
		t.Fatal(err)
	}
	if err := c.Close(); err != nil {
		t.Fatal(err)
	}
	if err := c.Confine(ctx, "a", &runtime.Spec{Layers: []string{src}}); err == nil {
		t.Fatal("confined after Close")
	}
	if mps, _ := mountinfo.MountsUnder(c.o.MountDir); len(mps) != 0 {
		t.Fatalf("layers mounted after Close: %v", mps)
	}
}
