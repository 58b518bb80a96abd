package image_test

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/google/go-containerregistry/pkg/name"
	"github.com/google/go-containerregistry/pkg/v1/remote"

	"github.com/shoal-run/shoal/internal/image"
	"github.com/shoal-run/shoal/internal/image/imagetest"
)

// TestPullMirrors follows registries.conf's [[registry]] tables: mirrors
// first (by digest only where it says so), a new location, a blocked
// registry refused. The image keeps the name it was asked by.
func TestPullMirrors(t *testing.T) {
	ctx := context.Background()
	mirror := imagetest.StartRegistry(t)
	src := openStore(t)
	bb := imagetest.Busybox(t, src, "busybox:1")
	r, _ := name.ParseReference(mirror + "/mirrors/team/app:1")
	if err := remote.Write(r, storedImage(t, src, bb), remote.WithContext(ctx)); err != nil {
		t.Fatalf("push: %v", err)
	}
	// 127.0.0.1:1 refuses connections: a pull that reaches it fails.
	conf := filepath.Join(t.TempDir(), "registries.conf")
	if err := os.WriteFile(conf, []byte(fmt.Sprintf(`
unqualified-search-registries = ["docker.io"]

[[registry]]
location = "127.0.0.1:1"
[[registry.mirror]]
location = "%[1]s/mirrors"
insecure = true

[[registry]]
location = "127.0.0.2:1"
mirror-by-digest-only = true
[[registry.mirror]]
location = "%[1]s/mirrors"
insecure = true

[[registry]]
prefix = "short.example/team"
location = "%[1]s/mirrors/team"
insecure = true

[[registry]]
location = "blocked.example"
blocked = true
`, mirror)), 0o644); err != nil {
		t.Fatal(err)
	}
	o := image.PullOptions{RegistriesConf: conf}

	dst := openStore(t)
	got, err := dst.Pull(ctx, "127.0.0.1:1/team/app:1", o)
	if err != nil || got.Digest != bb.Digest || got.Ref != "127.0.0.1:1/team/app:1" {
		t.Fatalf("pull through a mirror: %+v %v", got, err)
	}
	if len(got.Notes) != 1 || !strings.Contains(got.Notes[0], "mirror "+mirror+"/mirrors/team/app:1") {
		t.Fatalf("notes %q", got.Notes)
	}
	_, err = dst.Pull(ctx, "127.0.0.1:1/team/other:1", o)
	if err == nil || !strings.Contains(err.Error(), "mirrors tried first: "+mirror+"/mirrors/team/other:1") {
		t.Fatalf("pull of an image no source has: %v", err)
	}
	if _, err := dst.Pull(ctx, "127.0.0.2:1/team/app:1", o); err == nil {
		t.Fatal("a tag pulled from a mirror for digests only")
	}
	if got, err := dst.Pull(ctx, "127.0.0.2:1/team/app@"+bb.Digest, o); err != nil || got.Digest != bb.Digest {
		t.Fatalf("pull by digest through a digest-only mirror: %+v %v", got, err)
	}
	if got, err := dst.Pull(ctx, "short.example/team/app:1", o); err != nil || got.Ref != "short.example/team/app:1" || got.Digest != bb.Digest {
		t.Fatalf("pull from a new location: %+v %v", got, err)
	}
	if _, err := dst.Pull(ctx, "blocked.example/team/app:1", o); err == nil || !strings.Contains(err.Error(), "registry blocked.example is blocked in "+conf) {
		t.Fatalf("pull from a blocked registry: %v", err)
	}
	// No file: the registry named, as before.
	if _, err := openStore(t).Pull(ctx, "127.0.0.1:1/team/app:1", image.PullOptions{RegistriesConf: filepath.Join(t.TempDir(), "none")}); err == nil {
		t.Fatal("pulled from 127.0.0.1:1 without a mirror")
	}
}
