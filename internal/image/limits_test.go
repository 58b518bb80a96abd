package image

import (
	"context"
	"fmt"
	"path/filepath"
	"strings"
	"testing"

	"github.com/shoal-run/shoal/internal/errdefs"
)

// TestArchiveEntryLimit: an archive of many small entries is refused before
// it spends the inodes; the limit is the layers' MaxEntries.
func TestArchiveEntryLimit(t *testing.T) {
	ctx := context.Background()
	s, before := seeded(t, WithLimits(Limits{MaxEntries: 6}))
	layers := func(n int) [][]byte {
		var out [][]byte
		for i := range n {
			out = append(out, makeTar(t, reg(fmt.Sprintf("f%d", i), "x")))
		}
		return out
	}
	// manifest.json, the config, and per layer lN/ and lN/layer.tar.
	ok := writeFile(t, filepath.Join(t.TempDir(), "ok.tar"), dockerArchive(t, []string{"ok:1"}, layers(2)...))
	if _, err := s.Import(ctx, ok, ""); err != nil {
		t.Fatalf("archive of 6 entries: %v", err)
	}
	if err := s.Remove(ctx, "ok:1"); err != nil {
		t.Fatal(err)
	}
	assertUnchanged(t, s, before)
	many := writeFile(t, filepath.Join(t.TempDir(), "many.tar"), dockerArchive(t, []string{"many:1"}, layers(3)...))
	_, err := s.Import(ctx, many, "")
	if !errdefs.IsInvalid(err) || !strings.Contains(err.Error(), fmt.Sprintf("archive %q has more than 6 entries", many)) {
		t.Fatalf("archive of 8 entries: %v", err)
	}
	assertUnchanged(t, s, before)
}

// TestDeepNamesCountAsEntries: the directories one deep name creates count
// against MaxEntries, in archives and in layers alike.
func TestDeepNamesCountAsEntries(t *testing.T) {
	deep := strings.Repeat("d/", 10) + "file"
	tarball := makeTar(t, reg(deep, "x"))
	p := writeFile(t, filepath.Join(t.TempDir(), "deep.tar"), tarball)

	err := extractArchive(context.Background(), p, filepath.Join(t.TempDir(), "x"), 1<<20, 6)
	if !errdefs.IsInvalid(err) || !strings.Contains(err.Error(), "more than 6 entries") || !strings.Contains(err.Error(), p) {
		t.Fatalf("deep archive entry: %v", err)
	}
	if err := extractArchive(context.Background(), p, filepath.Join(t.TempDir(), "x"), 1<<20, 11); err != nil {
		t.Fatalf("deep archive entry within 11: %v", err)
	}

	lim := Limits{MaxLayerBytes: 1 << 20, MaxEntries: 6, MaxFileBytes: 1 << 20}
	if _, _, err := unpackBytes(t, tarball, lim); !errdefs.IsInvalid(err) || !strings.Contains(err.Error(), "more than 6 entries") {
		t.Fatalf("deep layer entry: %v", err)
	}
	lim.MaxEntries = 11
	if _, res, err := unpackBytes(t, tarball, lim); err != nil || res.Entries != 11 {
		t.Fatalf("deep layer entry within 11: %+v %v", res, err)
	}
}
