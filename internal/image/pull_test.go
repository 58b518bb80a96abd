package image_test

import (
	"context"
	"log/slog"
	"path/filepath"
	"runtime"
	"testing"

	"github.com/google/go-containerregistry/pkg/name"
	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/empty"
	"github.com/google/go-containerregistry/pkg/v1/layout"
	"github.com/google/go-containerregistry/pkg/v1/mutate"
	"github.com/google/go-containerregistry/pkg/v1/remote"

	"github.com/shoal-run/shoal/internal/errdefs"
	"github.com/shoal-run/shoal/internal/image"
	"github.com/shoal-run/shoal/internal/image/imagetest"
)

func openStore(t *testing.T) *image.Store {
	t.Helper()
	s, err := image.Open(filepath.Join(t.TempDir(), "images"), image.WithLogger(slog.New(slog.DiscardHandler)))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close() })
	return s
}

// storedImage reads an image of s back through go-containerregistry's
// layout package: the store root is an OCI layout.
func storedImage(t *testing.T, s *image.Store, img image.Image) v1.Image {
	t.Helper()
	idx, err := layout.ImageIndexFromPath(s.Root())
	if err != nil {
		t.Fatal(err)
	}
	h, err := v1.NewHash(img.Digest)
	if err != nil {
		t.Fatal(err)
	}
	v, err := idx.Image(h)
	if err != nil {
		t.Fatal(err)
	}
	return v
}

func TestPull(t *testing.T) {
	ctx := context.Background()
	addr := imagetest.StartRegistry(t)
	src := openStore(t)
	bb := imagetest.Busybox(t, src, "busybox:1")
	ref, err := name.ParseReference(addr + "/library/busybox:1")
	if err != nil {
		t.Fatal(err)
	}
	if err := remote.Write(ref, storedImage(t, src, bb), remote.WithContext(ctx)); err != nil {
		t.Fatalf("push: %v", err)
	}

	dst := openStore(t)
	got, err := dst.Pull(ctx, addr+"/library/busybox:1", image.PullOptions{Insecure: true})
	if err != nil {
		t.Fatal(err)
	}
	if got.Digest != bb.Digest || got.Ref != addr+"/library/busybox:1" || len(got.Layers) != 1 {
		t.Fatalf("pulled %+v, pushed %s", got, bb.Digest)
	}
	if g, err := dst.Get(ctx, addr+"/library/busybox:1"); err != nil || g.Digest != bb.Digest {
		t.Fatalf("Get after pull: %v", err)
	}
	// By digest: no reference kept.
	byDigest, err := dst.Pull(ctx, addr+"/library/busybox@"+bb.Digest, image.PullOptions{})
	if err != nil || byDigest.Ref != "" || byDigest.Digest != bb.Digest {
		t.Fatalf("digest pull %+v %v", byDigest, err)
	}
	if _, err := dst.Pull(ctx, addr+"/library/nothing:1", image.PullOptions{}); !errdefs.IsNotFound(err) {
		t.Fatalf("pull of a missing image: %v", err)
	}
}

func TestPullIndexPicksPlatform(t *testing.T) {
	ctx := context.Background()
	addr := imagetest.StartRegistry(t)
	src := openStore(t)
	bb := storedImage(t, src, imagetest.Busybox(t, src, "bb:1"))
	other, err := mutate.Config(bb, v1.Config{Cmd: []string{"other-arch"}})
	if err != nil {
		t.Fatal(err)
	}
	idx := mutate.AppendManifests(empty.Index,
		mutate.IndexAddendum{Add: other, Descriptor: v1.Descriptor{Platform: &v1.Platform{OS: "linux", Architecture: "s390x"}}},
		mutate.IndexAddendum{Add: bb, Descriptor: v1.Descriptor{Platform: &v1.Platform{OS: "linux", Architecture: runtime.GOARCH}}},
	)
	ref, _ := name.ParseReference(addr + "/multi:1")
	if err := remote.WriteIndex(ref, idx, remote.WithContext(ctx)); err != nil {
		t.Fatalf("push index: %v", err)
	}
	dst := openStore(t)
	got, err := dst.Pull(ctx, addr+"/multi:1", image.PullOptions{})
	if err != nil {
		t.Fatal(err)
	}
	want, _ := bb.Digest()
	if got.Digest != want.String() {
		t.Fatalf("pulled %s, want the %s manifest %s", got.Digest, runtime.GOARCH, want)
	}
	s390, err := dst.Pull(ctx, addr+"/multi:1", image.PullOptions{Platform: "linux/s390x"})
	if err != nil || len(s390.Config.Cmd) != 1 || s390.Config.Cmd[0] != "other-arch" {
		t.Fatalf("s390x pull %+v %v", s390, err)
	}
}
