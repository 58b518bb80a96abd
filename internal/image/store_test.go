package image

import (
	"context"
	"encoding/json"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"reflect"
	"slices"
	"strings"
	"testing"

	"github.com/shoal-run/shoal/internal/errdefs"
)

func buildDir(t *testing.T) string {
	t.Helper()
	d := t.TempDir()
	writeFile(t, filepath.Join(d, "app", "run.sh"), []byte("#!/bin/sh\necho hi\n"))
	os.Chmod(filepath.Join(d, "app", "run.sh"), 0o755)
	writeFile(t, filepath.Join(d, "etc", "motd"), []byte("hello\n"))
	os.Link(filepath.Join(d, "etc", "motd"), filepath.Join(d, "etc", "motd.hard"))
	os.Symlink("../app/run.sh", filepath.Join(d, "etc", "run"))
	return d
}

func TestBuildGetListRemove(t *testing.T) {
	ctx := context.Background()
	s := newStore(t)
	img, err := s.Build(ctx, buildDir(t), BuildOptions{Tag: "web:1", Entrypoint: []string{"/app/run.sh"},
		Cmd: []string{"x"}, Env: []string{"A=b"}, Workdir: "/app", Ports: []int{8080}})
	if err != nil {
		t.Fatal(err)
	}
	if img.Ref != "web:1" || len(img.Layers) != 1 || !strings.HasPrefix(img.Digest, "sha256:") {
		t.Fatalf("image %+v", img)
	}
	if _, ok := img.Config.ExposedPorts["8080/tcp"]; !ok || img.Config.WorkingDir != "/app" ||
		!slices.Contains(img.Config.Env, "A=b") || !slices.Contains(img.Config.Env, DefaultPath) {
		t.Fatalf("config %+v", img.Config)
	}
	b, err := os.ReadFile(filepath.Join(img.Layers[0], "etc", "motd.hard"))
	if err != nil || string(b) != "hello\n" {
		t.Fatalf("snapshot content %q %v", b, err)
	}
	if l, _ := os.Readlink(filepath.Join(img.Layers[0], "etc", "run")); l != "../app/run.sh" {
		t.Fatalf("symlink %q", l)
	}

	for _, ref := range []string{"web:1", img.Digest, img.ID, strings.TrimPrefix(img.Digest, "sha256:")[:12], img.ID[7:20]} {
		got, err := s.Get(ctx, ref)
		if err != nil || got.Digest != img.Digest {
			t.Fatalf("Get(%q) = %v, %v", ref, got.Digest, err)
		}
	}
	if _, err := s.Get(ctx, "web"); !errdefs.IsNotFound(err) {
		t.Fatalf("Get(web) = %v, want not found", err)
	}
	if _, err := s.Get(ctx, "Bad Ref"); !errdefs.IsInvalid(err) {
		t.Fatalf("Get(bad) = %v, want invalid", err)
	}

	// A second tag of the same content shares blobs and snapshot.
	img2, err := s.Build(ctx, buildDir(t), BuildOptions{Tag: "web"})
	if err != nil {
		t.Fatal(err)
	}
	if img2.Layers[0] != img.Layers[0] {
		t.Logf("layers differ (mtimes): %s %s", img2.Layers[0], img.Layers[0])
	}
	list, _ := s.List(ctx)
	if len(list) != 2 || list[0].Ref != "web:1" || list[1].Ref != "web:latest" {
		t.Fatalf("list %+v", list)
	}

	// Reopen: the index comes back from disk.
	s2 := reopen(t, s)
	if got, err := s2.Get(ctx, "web:1"); err != nil || got.Digest != img.Digest || got.Layers[0] != img.Layers[0] {
		t.Fatalf("after reopen: %+v %v", got, err)
	}
	if err := s2.Remove(ctx, "web:1"); err != nil {
		t.Fatal(err)
	}
	if err := s2.Remove(ctx, "web:latest"); err != nil {
		t.Fatal(err)
	}
	if err := s2.Remove(ctx, "web:latest"); !errdefs.IsNotFound(err) {
		t.Fatalf("second remove: %v", err)
	}
	st := diskState(t, s2)
	if len(st.blobs) != 0 || len(st.snaps) != 0 {
		t.Fatalf("left after removing every image: %+v", st)
	}
}

func TestOpenLocked(t *testing.T) {
	s := newStore(t)
	if _, err := Open(s.Root()); !errors.Is(err, errdefs.ErrUnavailable) {
		t.Fatalf("second Open: %v", err)
	}
}

func TestRemoveKeepsShared(t *testing.T) {
	ctx := context.Background()
	s := newStore(t)
	d := buildDir(t)
	a, err := s.Build(ctx, d, BuildOptions{Tag: "a:1"})
	if err != nil {
		t.Fatal(err)
	}
	// Same folder, other config: same layer, other image.
	b, err := s.Build(ctx, d, BuildOptions{Tag: "b:1", Cmd: []string{"sh"}})
	if err != nil {
		t.Fatal(err)
	}
	if a.Layers[0] != b.Layers[0] || a.Digest == b.Digest {
		t.Fatalf("layers %v %v digests %s %s", a.Layers, b.Layers, a.Digest, b.Digest)
	}
	if err := s.Remove(ctx, a.Digest); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(b.Layers[0]); err != nil {
		t.Fatalf("shared snapshot removed: %v", err)
	}
	if _, err := os.Stat(s.blobPath(a.ID)); !os.IsNotExist(err) {
		t.Fatalf("config of removed image kept: %v", err)
	}
}

// TestBuildReadByOtherTools proves skopeo and umoci accept the store layout.
func TestBuildReadByOtherTools(t *testing.T) {
	for _, tool := range []string{"skopeo", "umoci"} {
		if _, err := exec.LookPath(tool); err != nil {
			t.Fatalf("%s is needed: %v", tool, err)
		}
	}
	ctx := context.Background()
	s := newStore(t)
	img, err := s.Build(ctx, buildDir(t), BuildOptions{Tag: "tools:1", Cmd: []string{"/app/run.sh"}})
	if err != nil {
		t.Fatal(err)
	}
	out, err := exec.Command("skopeo", "inspect", "oci:"+s.Root()+":tools:1").CombinedOutput()
	if err != nil {
		t.Fatalf("skopeo inspect: %v\n%s", err, out)
	}
	var info struct{ Digest string }
	if err := json.Unmarshal(out, &info); err != nil || info.Digest != img.Digest {
		t.Fatalf("skopeo digest %q (%v), want %s\n%s", info.Digest, err, img.Digest, out)
	}
	bundle := filepath.Join(t.TempDir(), "bundle")
	s.Close() // umoci takes its own lock on the layout
	if out, err := exec.Command("umoci", "unpack", "--image", s.Root()+":tools:1", bundle).CombinedOutput(); err != nil {
		t.Fatalf("umoci unpack: %v\n%s", err, out)
	}
	b, err := os.ReadFile(filepath.Join(bundle, "rootfs", "etc", "motd"))
	if err != nil || string(b) != "hello\n" {
		t.Fatalf("umoci rootfs: %q %v", b, err)
	}
}

// TestOpenRecovers: leftovers of an interrupted write are cleared at Open,
// and a damaged image is dropped instead of blocking the store.
func TestOpenRecovers(t *testing.T) {
	ctx := context.Background()
	s := newStore(t)
	a, err := s.Build(ctx, buildDir(t), BuildOptions{Tag: "a:1"})
	if err != nil {
		t.Fatal(err)
	}
	b, err := s.Build(ctx, t.TempDir(), BuildOptions{Tag: "b:1"})
	if err != nil {
		t.Fatal(err)
	}
	s.Close()
	writeFile(t, filepath.Join(s.tmpDir(), "ingest-1", "blobs", "x"), []byte("partial"))
	orphan := writeFile(t, s.blobPath(digestOf([]byte("orphan"))), []byte("orphan"))
	if err := os.RemoveAll(b.Layers[0]); err != nil {
		t.Fatal(err)
	}
	s2 := reopen(t, s)
	st := diskState(t, s2)
	if len(st.tmp) != 0 {
		t.Fatalf("tmp not cleared: %v", st.tmp)
	}
	if _, err := os.Stat(orphan); !os.IsNotExist(err) {
		t.Fatalf("orphan blob kept: %v", err)
	}
	if _, err := s2.Get(ctx, "a:1"); err != nil {
		t.Fatal(err)
	}
	if _, err := s2.Get(ctx, "b:1"); !errdefs.IsNotFound(err) {
		t.Fatalf("damaged image: %v", err)
	}
	if _, err := os.Stat(a.Layers[0]); err != nil {
		t.Fatal(err)
	}
}

// failIndexWrites makes every index.json write fail until the test ends.
func failIndexWrites(t *testing.T) {
	t.Helper()
	orig := writeIndexFile
	writeIndexFile = func(string, []byte) error { return errors.New("disk full") }
	t.Cleanup(func() { writeIndexFile = orig })
}

// TestIndexWriteFailureChangesNothing: Remove and Build that cannot write
// index.json leave memory and disk as they were.
func TestIndexWriteFailureChangesNothing(t *testing.T) {
	ctx := context.Background()
	s := newStore(t)
	imgs := importLayered(t, s, "dock:1", "dock:latest")
	if _, err := s.Build(ctx, buildDir(t), BuildOptions{Tag: "other:1"}); err != nil {
		t.Fatal(err)
	}
	listBefore, _ := s.List(ctx)
	before := diskState(t, s)

	failIndexWrites(t)
	for _, ref := range []string{"dock:1", imgs[0].Digest, "other:1"} {
		if err := s.Remove(ctx, ref); err == nil || !strings.Contains(err.Error(), "disk full") {
			t.Fatalf("Remove(%s) with a failing index write: %v", ref, err)
		}
		list, _ := s.List(ctx)
		if !reflect.DeepEqual(list, listBefore) {
			t.Fatalf("Remove(%s) changed the list:\n%+v\nwant %+v", ref, list, listBefore)
		}
		for _, r := range []string{"dock:1", "dock:latest", "other:1"} {
			if _, err := s.Get(ctx, r); err != nil {
				t.Fatalf("after failed Remove(%s): Get(%s): %v", ref, r, err)
			}
		}
		assertUnchanged(t, s, before)
	}
	if _, err := s.Build(ctx, buildDir(t), BuildOptions{Tag: "dock:1", Cmd: []string{"new"}}); err == nil {
		t.Fatal("Build with a failing index write succeeded")
	}
	if list, _ := s.List(ctx); !reflect.DeepEqual(list, listBefore) {
		t.Fatalf("failed Build changed the list: %+v", list)
	}
	assertUnchanged(t, s, before)

	// Writes work again: the same removals go through.
	writeIndexFile = writeFileAtomic
	if err := s.Remove(ctx, "dock:1"); err != nil {
		t.Fatal(err)
	}
	if got, err := s.Get(ctx, "dock:latest"); err != nil || got.Digest != imgs[0].Digest {
		t.Fatalf("dock:latest after removing dock:1: %+v %v", got, err)
	}
	if err := s.Remove(ctx, imgs[0].Digest); err != nil {
		t.Fatal(err)
	}
	if list, _ := s.List(ctx); len(list) != 1 || list[0].Ref != "other:1" {
		t.Fatalf("list %+v", list)
	}
	if list, _ := reopen(t, s).List(ctx); len(list) != 1 || list[0].Ref != "other:1" {
		t.Fatalf("after reopen: %+v", list)
	}
}
