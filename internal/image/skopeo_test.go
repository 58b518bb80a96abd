package image

import (
	"context"
	"os/exec"
	"path/filepath"
	"reflect"
	"testing"
)

// skopeoCopy copies an image between two transports with skopeo.
func skopeoCopy(t *testing.T, src, dst string) {
	t.Helper()
	if _, err := exec.LookPath("skopeo"); err != nil {
		t.Fatalf("skopeo is needed: %v", err)
	}
	// A local file-to-file copy: no signature policy applies.
	if out, err := exec.Command("skopeo", "--insecure-policy", "copy", "--quiet", src, dst).CombinedOutput(); err != nil {
		t.Fatalf("skopeo copy %s %s: %v\n%s", src, dst, err, out)
	}
}

// sameImage checks that got, imported from a copy of want, is the same
// image: config, and layers unpacked to the very same snapshots (their
// diff IDs were checked on the way in).
func sameImage(t *testing.T, got, want Image) {
	t.Helper()
	if got.ID != want.ID {
		t.Errorf("image ID %s, want %s", got.ID, want.ID)
	}
	if !reflect.DeepEqual(got.Config, want.Config) {
		t.Errorf("config %+v, want %+v", got.Config, want.Config)
	}
	if len(got.Layers) != len(want.Layers) {
		t.Fatalf("layers %v, want %v", got.Layers, want.Layers)
	}
	for i := range got.Layers {
		if filepath.Base(got.Layers[i]) != filepath.Base(want.Layers[i]) {
			t.Errorf("layer %d: snapshot %s, want %s", i, got.Layers[i], want.Layers[i])
		}
	}
}

// TestImportSkopeoArchives: images the store holds, copied out by skopeo as
// a docker-archive and as an OCI layout, import back unchanged.
func TestImportSkopeoArchives(t *testing.T) {
	ctx := context.Background()
	src := newStore(t)
	built, err := src.Build(ctx, buildDir(t), BuildOptions{Tag: "tools:1", Entrypoint: []string{"/app/run.sh"},
		Cmd: []string{"x"}, Env: []string{"A=b"}, Workdir: "/app", Ports: []int{8080}})
	if err != nil {
		t.Fatal(err)
	}
	layered := importLayered(t, src, "dock:1")[0]

	for _, want := range []Image{built, layered} {
		t.Run(want.Ref, func(t *testing.T) {
			from := "oci:" + src.Root() + ":" + want.Ref

			archive := filepath.Join(t.TempDir(), "copy.tar")
			skopeoCopy(t, from, "docker-archive:"+archive+":copied:v1")
			dst := newStore(t)
			got, err := dst.Import(ctx, archive, "")
			if err != nil {
				t.Fatalf("import skopeo's docker-archive: %v", err)
			}
			if len(got) != 1 || got[0].Ref != "copied:v1" {
				t.Fatalf("docker-archive imported as %+v", got)
			}
			sameImage(t, got[0], want)
			if len(want.Layers) == 2 {
				checkOverlayView(t, got[0])
			}

			layout := filepath.Join(t.TempDir(), "layout")
			skopeoCopy(t, from, "oci:"+layout+":v2")
			got, err = dst.Import(ctx, layout, "")
			if err != nil {
				t.Fatalf("import skopeo's OCI layout: %v", err)
			}
			if len(got) != 1 || got[0].Ref != "layout:v2" {
				t.Fatalf("OCI layout imported as %+v", got)
			}
			// skopeo compresses uncompressed layers (those of the
			// docker-archive), so only the built image keeps its manifest.
			if want.Ref == built.Ref && got[0].Digest != want.Digest {
				t.Errorf("manifest %s, want %s (skopeo copied it unchanged)", got[0].Digest, want.Digest)
			}
			sameImage(t, got[0], want)
			if len(want.Layers) == 2 {
				checkOverlayView(t, got[0])
			}
		})
	}
}

func TestDockerFamiliar(t *testing.T) {
	for in, want := range map[string]string{
		"docker.io/library/app:1":     "app:1",
		"index.docker.io/library/app": "app",
		"docker.io/user/app:2":        "user/app:2",
		"app:1":                       "app:1",
		"ghcr.io/library/app:1":       "ghcr.io/library/app:1",
		"127.0.0.1:5000/app:1":        "127.0.0.1:5000/app:1",
	} {
		if got := dockerFamiliar(in); got != want {
			t.Errorf("dockerFamiliar(%q) = %q, want %q", in, got, want)
		}
	}
}
