package volume

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"

	"golang.org/x/sys/unix"

	"github.com/shoal-run/shoal/internal/errdefs"
	"github.com/shoal-run/shoal/internal/manifest"
	"github.com/shoal-run/shoal/internal/units"
	"github.com/shoal-run/shoal/internal/userns"
)

// image makes two layers: the bottom one with /etc/passwd (user app,
// 1000:1001) and /data/seed (app's, 0640); the top one adds /data/sub/more.
func image(t *testing.T) []string {
	t.Helper()
	if os.Geteuid() != 0 {
		t.Fatal("these tests mount overlays: run them as root")
	}
	bottom, top := t.TempDir(), t.TempDir()
	for _, f := range []struct {
		layer, path, body string
		uid, gid          int
		mode              os.FileMode
	}{
		{bottom, "etc/passwd", "root:x:0:0::/root:/bin/sh\napp:x:1000:1001::/home/app:/bin/sh\n", 0, 0, 0o644},
		{bottom, "data/seed", "seed\n", 1000, 1001, 0o640},
		{top, "data/sub/more", "more\n", 0, 0, 0o600},
	} {
		p := filepath.Join(f.layer, f.path)
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, []byte(f.body), f.mode); err != nil {
			t.Fatal(err)
		}
		if err := os.Chown(p, f.uid, f.gid); err != nil {
			t.Fatal(err)
		}
	}
	for _, l := range []string{bottom, top} {
		if err := os.Chmod(filepath.Join(l, "data"), 0o770); err != nil {
			t.Fatal(err)
		}
	}
	return []string{bottom, top}
}

func ids(t *testing.T, p string) (uint32, uint32, os.FileMode) {
	t.Helper()
	fi, err := os.Lstat(p)
	if err != nil {
		t.Fatal(err)
	}
	st := fi.Sys().(*syscall.Stat_t)
	return st.Uid, st.Gid, fi.Mode()
}

func TestPrepareCopiesUp(t *testing.T) {
	layers := image(t)
	for _, host := range []uint32{0, userns.Base + 9*userns.Size} {
		apps := t.TempDir()
		vol := filepath.Join(apps, "web", "volumes", "data")
		empty := filepath.Join(apps, "web", "volumes", "empty")
		var p Preparer
		vols := []Mount{{Dir: vol, Path: "/data", Owner: manifest.VolumeOwner{UID: -1, GID: -1}},
			{Dir: empty, Path: "/nothing/here", Owner: manifest.VolumeOwner{UID: 33, GID: 34}}}
		if err := p.Prepare(context.Background(), vols, Image{Layers: layers, User: "app"}, host, 0); err != nil {
			t.Fatal(err)
		}
		if b, err := os.ReadFile(filepath.Join(vol, "seed")); err != nil || string(b) != "seed\n" {
			t.Fatalf("host %d: seed %q %v", host, b, err)
		}
		if b, err := os.ReadFile(filepath.Join(vol, "sub/more")); err != nil || string(b) != "more\n" {
			t.Fatalf("host %d: the top layer's file %q %v", host, b, err)
		}
		if u, g, m := ids(t, filepath.Join(vol, "seed")); u != host+1000 || g != host+1001 || m.Perm() != 0o640 {
			t.Fatalf("host %d: seed %d:%d %v", host, u, g, m)
		}
		if u, g, m := ids(t, vol); u != host+1000 || g != host+1001 || m.Perm() != 0o770 {
			t.Fatalf("host %d: the volume's root %d:%d %v; want the image user's, the image's mode", host, u, g, m)
		}
		if u, g, m := ids(t, empty); u != host+33 || g != host+34 || m.Perm() != 0o755 {
			t.Fatalf("host %d: the empty volume's root %d:%d %v", host, u, g, m)
		}
		// There already: nothing copied again; the root's owner is the
		// app's affair but for the ids the manifest gives.
		os.Remove(filepath.Join(vol, "seed"))
		os.Lchown(vol, int(host+5), int(host+5))
		os.Lchown(empty, int(host+5), int(host+5))
		if err := p.Prepare(context.Background(), vols, Image{Layers: layers, User: "app"}, host, 0); err != nil {
			t.Fatal(err)
		}
		if _, err := os.Stat(filepath.Join(vol, "seed")); !os.IsNotExist(err) {
			t.Fatalf("host %d: copied up into a volume that was there", host)
		}
		if u, _, _ := ids(t, vol); u != host+5 {
			t.Fatalf("host %d: root owner %d after a second start, want the one the app gave it", host, u)
		}
		if u, g, _ := ids(t, empty); u != host+33 || g != host+34 {
			t.Fatalf("host %d: root owner %d:%d after a second start, want uid and gid's", host, u, g)
		}
		left, _ := filepath.Glob(filepath.Join(apps, "web", "volumes", ".*"))
		if len(left) != 0 {
			t.Fatalf("left behind: %v", left)
		}
	}
}

func TestPrepareUnknownUser(t *testing.T) {
	layers := image(t)
	var p Preparer
	dir := filepath.Join(t.TempDir(), "volumes", "data")
	err := p.Prepare(context.Background(), []Mount{{Dir: dir, Path: "/data", Owner: manifest.VolumeOwner{UID: -1, GID: -1}}}, Image{Layers: layers, User: "nobody"}, 0, 0)
	if err == nil {
		t.Fatal("no error for a user the image does not have")
	}
	if _, serr := os.Stat(dir); !os.IsNotExist(serr) {
		t.Fatalf("volume made though its start failed (%v)", err)
	}
	left, _ := filepath.Glob(filepath.Join(filepath.Dir(dir), ".*"))
	if len(left) != 0 {
		t.Fatalf("left behind: %v", left)
	}
}

// A copy-up above its limit (the app's disk, or DefaultMaxBytes) is
// refused before anything is copied, and one whose context ends stops:
// neither leaves a volume or anything beside it.
func TestPrepareCopyUpBounded(t *testing.T) {
	layers := image(t)
	cancelled, cancel := context.WithCancel(context.Background())
	cancel()
	for name, c := range map[string]struct {
		ctx   context.Context
		limit int64
		want  error
	}{
		"above the limit": {context.Background(), 4, errdefs.ErrInvalid},
		"cancelled":       {cancelled, 0, context.Canceled},
	} {
		t.Run(name, func(t *testing.T) {
			var p Preparer
			dir := filepath.Join(t.TempDir(), "volumes", "data")
			err := p.Prepare(c.ctx, []Mount{{Dir: dir, Path: "/data", Owner: manifest.VolumeOwner{UID: -1, GID: -1}}},
				Image{Layers: layers, User: "app"}, 0, c.limit)
			if !errors.Is(err, c.want) {
				t.Fatalf("copy-up: %v, want %v", err, c.want)
			}
			if c.limit > 0 && !strings.Contains(err.Error(), "more than "+units.FormatBytes(4)) {
				t.Fatalf("copy-up above the limit: %v, want the limit named", err)
			}
			if _, serr := os.Stat(dir); !os.IsNotExist(serr) {
				t.Fatalf("volume made though its copy-up failed (%v)", err)
			}
			left, _ := filepath.Glob(filepath.Join(filepath.Dir(dir), ".*"))
			if len(left) != 0 {
				t.Fatalf("left behind: %v", left)
			}
		})
	}
	// Within the limit (the image's two files, 10 bytes): made.
	var p Preparer
	dir := filepath.Join(t.TempDir(), "volumes", "data")
	if err := p.Prepare(context.Background(), []Mount{{Dir: dir, Path: "/data", Owner: manifest.VolumeOwner{UID: -1, GID: -1}}},
		Image{Layers: layers, User: "app"}, 0, 10); err != nil {
		t.Fatal(err)
	}
}

// TestWithImageOffMainThread: withImage never unshares the main thread's
// mount namespace (Go parks that thread rather than ending it, so the
// namespace would stay, with a copy of every mount, and be the one
// /proc/self shows). Many calls give the scheduler many chances to pick
// it; the process's namespace stays the same.
func TestWithImageOffMainThread(t *testing.T) {
	layers := image(t)
	before, err := os.Readlink("/proc/self/ns/mnt")
	if err != nil {
		t.Fatal(err)
	}
	for i := 0; i < 20; i++ {
		if err := withImage(layers, t.TempDir(), func(string) error {
			if unix.Gettid() == unix.Getpid() {
				return errors.New("fn runs on the main thread")
			}
			return nil
		}); err != nil {
			t.Fatalf("call %d: %v", i, err)
		}
		if now, err := os.Readlink("/proc/self/ns/mnt"); err != nil || now != before {
			t.Fatalf("call %d: the process's mount namespace is %s (%v), was %s", i, now, err, before)
		}
	}
}
