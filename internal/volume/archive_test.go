package volume

import (
	"archive/tar"
	"bytes"
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/shoal-run/shoal/internal/errdefs"
	"github.com/shoal-run/shoal/internal/units"
)

func tarBytes(t *testing.T, hs ...*tar.Header) []byte {
	t.Helper()
	var b bytes.Buffer
	tw := tar.NewWriter(&b)
	for _, h := range hs {
		if h.Typeflag == tar.TypeReg {
			h.Size = int64(len(h.Linkname))
		}
		body := h.Linkname
		if h.Typeflag == tar.TypeReg {
			h.Linkname = ""
		}
		if err := tw.WriteHeader(h); err != nil {
			t.Fatal(err)
		}
		if h.Typeflag == tar.TypeReg {
			tw.Write([]byte(body))
		}
	}
	tw.Close()
	return b.Bytes()
}

// TestImportRefusesAndMerges: an entry out of the folder, a device or a
// link out of the archive is refused and changes nothing; a good archive
// merges with the volume: files replaced, folders merged, owners shifted.
func TestImportRefusesAndMerges(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Fatal("import sets owners: run as root")
	}
	apps := t.TempDir()
	vol := filepath.Join(apps, "web", "volumes", "data")
	if err := os.MkdirAll(filepath.Join(vol, "sub"), 0o755); err != nil {
		t.Fatal(err)
	}
	os.WriteFile(filepath.Join(vol, "keep.txt"), []byte("keep"), 0o644)
	os.WriteFile(filepath.Join(vol, "sub", "old.txt"), []byte("old"), 0o644)
	s := &Service{Dir: apps, Apps: func(context.Context) (map[string]map[string]string, error) { return nil, nil }}
	ctx := context.Background()
	for _, bad := range [][]byte{
		tarBytes(t, &tar.Header{Name: "ok.txt", Typeflag: tar.TypeReg, Linkname: "x"}, &tar.Header{Name: "../escape", Typeflag: tar.TypeReg, Linkname: "x"}),
		tarBytes(t, &tar.Header{Name: "dev", Typeflag: tar.TypeChar, Mode: 0o600}),
		tarBytes(t, &tar.Header{Name: "l", Typeflag: tar.TypeLink, Linkname: "../../etc/passwd"}),
	} {
		if err := s.Import(ctx, "web", "data", "/", bytes.NewReader(bad), 0); err == nil {
			t.Fatal("a bad archive was imported")
		}
		if _, err := os.Stat(filepath.Join(vol, "ok.txt")); !os.IsNotExist(err) {
			t.Fatal("a refused archive changed the volume")
		}
	}
	// Above its limit: refused, naming it, nothing changed or left.
	big := tarBytes(t, &tar.Header{Name: "ok.txt", Typeflag: tar.TypeReg, Linkname: "1234", Mode: 0o644},
		&tar.Header{Name: "big.txt", Typeflag: tar.TypeReg, Linkname: "56789", Mode: 0o644})
	if err := s.Import(ctx, "web", "data", "/", bytes.NewReader(big), 8); !errdefs.IsInvalid(err) || !strings.Contains(err.Error(), "big.txt") ||
		!strings.Contains(err.Error(), "more than "+units.FormatBytes(8)) {
		t.Fatalf("an archive above the limit: %v, want invalid, naming the entry and the limit", err)
	}
	if _, err := os.Stat(filepath.Join(vol, "ok.txt")); !os.IsNotExist(err) {
		t.Fatal("an archive above the limit changed the volume")
	}
	if left, _ := filepath.Glob(filepath.Join(filepath.Dir(vol), ".*")); len(left) != 0 {
		t.Fatalf("an archive above the limit left %v", left)
	}
	good := tarBytes(t,
		&tar.Header{Name: "sub/", Typeflag: tar.TypeDir, Mode: 0o750, Uid: 33, Gid: 33},
		&tar.Header{Name: "sub/new.txt", Typeflag: tar.TypeReg, Linkname: "new", Mode: 0o600, Uid: 33, Gid: 33},
		&tar.Header{Name: "keep.txt", Typeflag: tar.TypeReg, Linkname: "replaced", Mode: 0o644})
	if err := s.Import(ctx, "web", "data", "/", bytes.NewReader(good), 0); err != nil {
		t.Fatal(err)
	}
	for p, want := range map[string]string{"keep.txt": "replaced", "sub/old.txt": "old", "sub/new.txt": "new"} {
		if b, err := os.ReadFile(filepath.Join(vol, p)); err != nil || string(b) != want {
			t.Fatalf("%s: %q %v, want %q", p, b, err, want)
		}
	}
	if u, _, m := ids(t, filepath.Join(vol, "sub")); u != 33 || m.Perm() != 0o750 {
		t.Fatalf("merged folder: owner %d mode %v", u, m)
	}
	left, _ := filepath.Glob(filepath.Join(filepath.Dir(vol), ".*"))
	if len(left) != 0 {
		t.Fatalf("left beside the volume: %v", left)
	}
	var out bytes.Buffer
	if err := s.Export(ctx, "web", "data", "/sub", &out); err != nil {
		t.Fatal(err)
	}
	tr := tar.NewReader(&out)
	var names []string
	for h, err := tr.Next(); err == nil; h, err = tr.Next() {
		names = append(names, h.Name)
	}
	if got := strings.Join(names, " "); got != "sub/ sub/new.txt sub/old.txt" {
		t.Fatalf("export of /sub: %s", got)
	}
}
