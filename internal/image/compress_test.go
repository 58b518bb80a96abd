package image

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestImportDockerArchiveCompressesLayers: docker save writes layers
// uncompressed; the store keeps them gzipped (their diff IDs unchanged),
// and the same archive imported again is the same image.
func TestImportDockerArchiveCompressesLayers(t *testing.T) {
	var text strings.Builder
	for i := 0; text.Len() < 512<<10; i++ {
		fmt.Fprintf(&text, "line %d of a file an app's image carries, text that compresses as such text does\n", i)
	}
	layer := makeTar(t, dir("usr/"), reg("usr/README", text.String()), reg("usr/small", "x"))
	p := writeFile(t, filepath.Join(t.TempDir(), "save.tar"), dockerArchive(t, []string{"app:1"}, layer))
	s := newStore(t)
	imgs, err := s.Import(context.Background(), p, "")
	if err != nil {
		t.Fatal(err)
	}
	img := imgs[0]
	if img.Size*4 > int64(len(layer)) {
		t.Fatalf("stored layers take %d bytes for a %d-byte tar: not compressed", img.Size, len(layer))
	}
	if b, err := os.ReadFile(filepath.Join(img.Layers[0], "usr", "README")); err != nil || string(b) != text.String() {
		t.Fatalf("usr/README unpacked wrong: %d bytes, %v", len(b), err)
	}
	if got := s.knownDiffID(s.byDigest[img.Digest].blobs[2]); got != digestOf(layer) {
		t.Fatalf("layer's diff ID %s, the tar's %s", got, digestOf(layer))
	}
	again, err := newStore(t).Import(context.Background(), p, "")
	if err != nil || again[0].Digest != img.Digest {
		t.Fatalf("imported again: %+v %v, first %s", again, err, img.Digest)
	}
}
