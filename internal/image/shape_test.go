package image

import (
	"context"
	"fmt"
	"path/filepath"
	"strings"
	"testing"

	digest "github.com/opencontainers/go-digest"
	ocispec "github.com/opencontainers/image-spec/specs-go/v1"

	"github.com/shoal-run/shoal/internal/errdefs"
)

// A tar entry's name is at most MaxNameBytes long and MaxNameParts deep,
// in layers and in archives alike; a name at the limits unpacks.
func TestEntryNameShape(t *testing.T) {
	part := strings.Repeat("n", 200)
	long := strings.Repeat(part+"/", 20) + "file"      // 4024 bytes, 21 parts: fine
	tooLong := strings.Repeat(part+"/", 21) + "file"   // 4225 bytes
	deep := strings.Repeat("d/", MaxNameParts-1) + "f" // 128 parts: fine
	tooDeep := strings.Repeat("d/", MaxNameParts) + "f"
	lim := Limits{MaxLayerBytes: 1 << 20, MaxEntries: 1000, MaxFileBytes: 1 << 20}
	for name, want := range map[string]string{
		long:    "",
		deep:    "",
		tooLong: "name of 4225 bytes, above the limit of 4096",
		tooDeep: "name of 129 parts, above the limit of 128",
	} {
		tarball := makeTar(t, reg(name, "x"))
		_, _, err := unpackBytes(t, tarball, lim)
		aerr := extractArchive(context.Background(), writeFile(t, filepath.Join(t.TempDir(), "a.tar"), tarball), filepath.Join(t.TempDir(), "x"), 1<<20, 1000)
		for what, err := range map[string]error{"layer": err, "archive": aerr} {
			switch {
			case want == "" && err != nil:
				t.Errorf("%s entry of %d bytes: %v", what, len(name), err)
			case want != "" && (!errdefs.IsInvalid(err) || !strings.Contains(fmt.Sprint(err), want) || len(err.Error()) > 600):
				t.Errorf("%s entry of %d bytes: %.300v, want an invalid input saying %q (the name cut short)", what, len(name), err, want)
			}
		}
	}
	// A hard link's target too.
	tarball := makeTar(t, reg("f", "x"), hardlink("g", tooDeep))
	if _, _, err := unpackBytes(t, tarball, lim); !strings.Contains(fmt.Sprint(err), "above the limit of 128") {
		t.Errorf("hard link to a deep name: %v", err)
	}
}

// An image's config (and manifest) is measured before it is decoded: one
// of more than 100,000 values is refused, naming it.
func TestConfigOfManyValues(t *testing.T) {
	mb := []byte(`{"schemaVersion":2,"config":{"mediaType":"application/vnd.oci.image.config.v1+json","digest":"sha256:` + strings.Repeat("a", 64) + `","size":1},"layers":[]}`)
	ok := `{"rootfs":{"type":"layers","diff_ids":[]},"history":[` + strings.Repeat(`{},`, 1000) + `{}]}`
	if _, err := newRecord(ocispec.Descriptor{Digest: digest.Digest("sha256:" + strings.Repeat("b", 64))}, mb, []byte(ok)); err != nil {
		t.Fatalf("config of 1001 history entries: %v", err)
	}
	many := `{"rootfs":{"type":"layers","diff_ids":[]},"history":[` + strings.Repeat(`{},`, 100_000) + `{}]}`
	_, err := newRecord(ocispec.Descriptor{Digest: digest.Digest("sha256:" + strings.Repeat("b", 64))}, mb, []byte(many))
	if !errdefs.IsInvalid(err) || errdefs.Field(err) != "config" || !strings.Contains(err.Error(), "more than 100000 values") {
		t.Fatalf("config of 100,001 history entries: %v", err)
	}
}

// A manifest of more than MaxLayers layers is refused.
func TestManifestOfManyLayers(t *testing.T) {
	layer := `{"mediaType":"application/vnd.oci.image.layer.v1.tar","digest":"sha256:` + strings.Repeat("c", 64) + `","size":1}`
	mb := []byte(`{"schemaVersion":2,"config":{"mediaType":"application/vnd.oci.image.config.v1+json","digest":"sha256:` + strings.Repeat("a", 64) + `","size":1},"layers":[` + strings.Repeat(layer+",", MaxLayers) + layer + `]}`)
	cb := []byte(`{"rootfs":{"type":"layers","diff_ids":[` + strings.Repeat(`"sha256:`+strings.Repeat("d", 64)+`",`, MaxLayers) + `"sha256:` + strings.Repeat("d", 64) + `"]}}`)
	_, err := newRecord(ocispec.Descriptor{Digest: digest.Digest("sha256:" + strings.Repeat("b", 64))}, mb, cb)
	if !errdefs.IsInvalid(err) || !strings.Contains(fmt.Sprint(err), "129 layers, above the limit of 128") {
		t.Fatalf("manifest of 129 layers: %v", err)
	}
}
