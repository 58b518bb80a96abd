package image

import (
	"archive/tar"
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/shoal-run/shoal/internal/errdefs"
)

// tarFiles packs named files (sorted) into a tar.
func tarFiles(t *testing.T, files map[string][]byte) []byte {
	t.Helper()
	names := make([]string, 0, len(files))
	for n := range files {
		names = append(names, n)
	}
	slices.Sort(names)
	var buf bytes.Buffer
	tw := tar.NewWriter(&buf)
	for _, n := range names {
		tw.WriteHeader(&tar.Header{Name: n, Mode: 0o644, Size: int64(len(files[n])), Typeflag: tar.TypeReg, ModTime: time.Unix(1700000000, 0)})
		tw.Write(files[n])
	}
	if err := tw.Close(); err != nil {
		t.Fatal(err)
	}
	return buf.Bytes()
}

// whiteoutLayers are two layers: the second deletes etc/a and makes
// var/cache opaque.
func whiteoutLayers(t *testing.T) (l1, l2 []byte) {
	l1 = makeTar(t, dir("etc/"), reg("etc/a", "a"), reg("etc/b", "b"), dir("var/"), dir("var/cache/"), reg("var/cache/old", "old"))
	l2 = makeTar(t, dir("etc/"), reg("etc/.wh.a", ""), dir("var/cache/"), reg("var/cache/.wh..wh..opq", ""), reg("var/cache/new", "new"))
	return l1, l2
}

func dockerArchive(t *testing.T, tags []string, layers ...[]byte) []byte {
	t.Helper()
	files := map[string][]byte{}
	var diffIDs, paths []string
	for i, l := range layers {
		p := fmt.Sprintf("l%d/layer.tar", i)
		files[p] = l
		paths = append(paths, p)
		diffIDs = append(diffIDs, digestOf(l))
	}
	cfg, _ := json.Marshal(map[string]any{
		"architecture": "amd64", "os": "linux",
		"config": map[string]any{"Cmd": []string{"sh"}, "Env": []string{"X=1"}},
		"rootfs": map[string]any{"type": "layers", "diff_ids": diffIDs},
	})
	cfgName := strings.TrimPrefix(digestOf(cfg), "sha256:") + ".json"
	files[cfgName] = cfg
	man, _ := json.Marshal([]map[string]any{{"Config": cfgName, "RepoTags": tags, "Layers": paths}})
	files["manifest.json"] = man
	return tarFiles(t, files)
}

func checkOverlayView(t *testing.T, img Image) {
	t.Helper()
	top := img.Layers[1]
	var st unix.Stat_t
	if err := unix.Lstat(filepath.Join(top, "etc/a"), &st); err != nil || st.Mode&unix.S_IFMT != unix.S_IFCHR || st.Rdev != 0 {
		t.Fatalf("whiteout etc/a: mode %o rdev %d err %v", st.Mode, st.Rdev, err)
	}
	buf := make([]byte, 4)
	if n, err := unix.Lgetxattr(filepath.Join(top, "var/cache"), opaqueXattr, buf); err != nil || string(buf[:n]) != "y" {
		t.Fatalf("opaque var/cache: %q %v", buf[:n], err)
	}
	// The real view: overlayfs with the layers top first.
	mnt := t.TempDir()
	lower := slices.Clone(img.Layers)
	slices.Reverse(lower)
	if err := unix.Mount("overlay", mnt, "overlay", unix.MS_RDONLY, "lowerdir="+strings.Join(lower, ":")); err != nil {
		t.Fatalf("mount overlay (needs root): %v", err)
	}
	t.Cleanup(func() { unix.Unmount(mnt, unix.MNT_DETACH) })
	for p, want := range map[string]string{"etc/a": "", "etc/b": "b", "var/cache/old": "", "var/cache/new": "new"} {
		b, err := os.ReadFile(filepath.Join(mnt, p))
		if want == "" {
			if !os.IsNotExist(err) {
				t.Errorf("%s visible through overlay: %q %v", p, b, err)
			}
		} else if string(b) != want {
			t.Errorf("%s = %q (%v), want %q", p, b, err, want)
		}
	}
}

func TestImportDockerArchive(t *testing.T) {
	ctx := context.Background()
	s := newStore(t)
	imgs := importLayered(t, s, "dock:1", "dock:latest")
	if len(imgs) != 2 || imgs[0].Ref != "dock:1" || imgs[1].Ref != "dock:latest" || imgs[0].Digest != imgs[1].Digest {
		t.Fatalf("imported %+v", imgs)
	}
	if !slices.Equal(imgs[0].Config.Cmd, []string{"sh"}) || len(imgs[0].Layers) != 2 {
		t.Fatalf("image %+v", imgs[0])
	}
	checkOverlayView(t, imgs[0])

	// Gzipped, with a tag overriding RepoTags.
	l1, _ := whiteoutLayers(t)
	p2 := writeFile(t, filepath.Join(t.TempDir(), "save.tar.gz"), gz(t, dockerArchive(t, []string{"x:1"}, l1)))
	imgs, err := s.Import(ctx, p2, "over:2")
	if err != nil || len(imgs) != 1 || imgs[0].Ref != "over:2" {
		t.Fatalf("gz import %+v %v", imgs, err)
	}
	// The shared bottom layer is one snapshot.
	d, _ := s.Get(ctx, "dock:1")
	if imgs[0].Layers[0] != d.Layers[0] {
		t.Fatalf("bottom layer not shared: %s %s", imgs[0].Layers[0], d.Layers[0])
	}
}

func TestImportRootfsTar(t *testing.T) {
	ctx := context.Background()
	s := newStore(t)
	rootfs := makeTar(t, dir("bin/"), reg("bin/hello", "#!/bin/sh\n"), symlink("sbin", "bin"))
	for _, c := range []struct{ file, tag string }{{"rootfs.tar", "root:1"}, {"rootfs.tar.gz", "root:2"}} {
		data := rootfs
		if strings.HasSuffix(c.file, ".gz") {
			data = gz(t, rootfs)
		}
		p := writeFile(t, filepath.Join(t.TempDir(), c.file), data)
		before := diskState(t, s)
		if _, err := s.Import(ctx, p, ""); !errdefs.IsInvalid(err) || errdefs.Field(err) != "tag" {
			t.Fatalf("untagged rootfs import: %v", err)
		}
		assertUnchanged(t, s, before)
		imgs, err := s.Import(ctx, p, c.tag)
		if err != nil {
			t.Fatal(err)
		}
		if b, err := os.ReadFile(filepath.Join(imgs[0].Layers[0], "bin/hello")); err != nil || string(b) != "#!/bin/sh\n" {
			t.Fatalf("%s: %q %v", c.file, b, err)
		}
	}
}

// umociLayout makes an OCI layout with umoci: tag "base" with two layers,
// the second deleting a file.
func umociLayout(t *testing.T) string {
	t.Helper()
	if _, err := exec.LookPath("umoci"); err != nil {
		t.Fatalf("umoci is needed: %v", err)
	}
	layout := filepath.Join(t.TempDir(), "myapp")
	bundle := filepath.Join(t.TempDir(), "bundle")
	run := func(args ...string) {
		t.Helper()
		if out, err := exec.Command("umoci", args...).CombinedOutput(); err != nil {
			t.Fatalf("umoci %v: %v\n%s", args, err, out)
		}
	}
	run("init", "--layout", layout)
	run("new", "--image", layout+":base")
	run("unpack", "--image", layout+":base", bundle)
	writeFile(t, filepath.Join(bundle, "rootfs/etc/keep"), []byte("keep"))
	writeFile(t, filepath.Join(bundle, "rootfs/etc/gone"), []byte("gone"))
	run("repack", "--image", layout+":base", bundle)
	bundle = filepath.Join(t.TempDir(), "bundle2")
	run("unpack", "--image", layout+":base", bundle)
	if err := os.Remove(filepath.Join(bundle, "rootfs/etc/gone")); err != nil {
		t.Fatal(err)
	}
	run("repack", "--image", layout+":base", bundle)
	run("config", "--image", layout+":base", "--config.cmd", "/bin/true")
	return layout
}

func TestImportOCILayout(t *testing.T) {
	ctx := context.Background()
	layout := umociLayout(t)
	s := newStore(t)
	imgs, err := s.Import(ctx, layout, "")
	if err != nil {
		t.Fatal(err)
	}
	if len(imgs) != 1 || imgs[0].Ref != "myapp:base" || !slices.Equal(imgs[0].Config.Cmd, []string{"/bin/true"}) {
		t.Fatalf("imported %+v", imgs)
	}
	img := imgs[0]
	top := img.Layers[len(img.Layers)-1]
	var st unix.Stat_t
	if err := unix.Lstat(filepath.Join(top, "etc/gone"), &st); err != nil || st.Mode&unix.S_IFMT != unix.S_IFCHR {
		t.Fatalf("umoci's deletion is not a whiteout: %v", err)
	}

	// The same layout as a tar, and gzipped: same image.
	tarPath := filepath.Join(t.TempDir(), "myapp.tar")
	if out, err := exec.Command("tar", "-C", layout, "-cf", tarPath, ".").CombinedOutput(); err != nil {
		t.Fatalf("tar: %v\n%s", err, out)
	}
	s2 := newStore(t)
	imgs2, err := s2.Import(ctx, tarPath, "")
	if err != nil {
		t.Fatal(err)
	}
	if imgs2[0].Digest != img.Digest || imgs2[0].Ref != "myapp:base" {
		t.Fatalf("tar import %+v", imgs2[0])
	}
	gzPath := filepath.Join(t.TempDir(), "other.tar.gz")
	if out, err := exec.Command("sh", "-c", "gzip -c "+tarPath+" > "+gzPath).CombinedOutput(); err != nil {
		t.Fatalf("gzip: %v\n%s", err, out)
	}
	imgs3, err := s2.Import(ctx, gzPath, "renamed:v2")
	if err != nil || imgs3[0].Digest != img.Digest || imgs3[0].Ref != "renamed:v2" {
		t.Fatalf("gz import %+v %v", imgs3, err)
	}
}
