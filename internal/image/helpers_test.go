package image

import (
	"archive/tar"
	"bytes"
	"compress/gzip"
	"context"
	"log/slog"
	"os"
	"path/filepath"
	"slices"
	"testing"
	"time"
)

func newStore(t *testing.T, opts ...Option) *Store {
	t.Helper()
	opts = append([]Option{WithLogger(slog.New(slog.DiscardHandler))}, opts...)
	s, err := Open(filepath.Join(t.TempDir(), "images"), opts...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close() })
	return s
}

// state is what a store holds on disk: blob and snapshot names, the index.
type state struct {
	blobs, snaps, tmp []string
	index             string
}

func diskState(t *testing.T, s *Store) state {
	t.Helper()
	names := func(dir string) []string {
		ents, err := os.ReadDir(dir)
		if err != nil {
			t.Fatal(err)
		}
		var out []string
		for _, e := range ents {
			out = append(out, e.Name())
		}
		return out
	}
	idx, _ := os.ReadFile(filepath.Join(s.Root(), "index.json"))
	return state{names(s.blobDir()), names(s.snapDir()), names(s.tmpDir()), string(idx)}
}

func assertUnchanged(t *testing.T, s *Store, before state) {
	t.Helper()
	after := diskState(t, s)
	if !slices.Equal(before.blobs, after.blobs) || !slices.Equal(before.snaps, after.snaps) || before.index != after.index {
		t.Fatalf("store changed:\nbefore %+v\nafter  %+v", before, after)
	}
	if len(after.tmp) != 0 {
		t.Fatalf("staging left behind: %v", after.tmp)
	}
}

// entry is one tar entry for tests.
type entry struct {
	name, link, body string
	typ              byte
	mode             int64
}

func reg(name, body string) entry {
	return entry{name: name, body: body, typ: tar.TypeReg, mode: 0o644}
}
func dir(name string) entry { return entry{name: name, typ: tar.TypeDir, mode: 0o755} }
func symlink(name, target string) entry {
	return entry{name: name, link: target, typ: tar.TypeSymlink, mode: 0o777}
}
func hardlink(name, target string) entry {
	return entry{name: name, link: target, typ: tar.TypeLink, mode: 0o644}
}

func makeTar(t testing.TB, entries ...entry) []byte {
	t.Helper()
	var buf bytes.Buffer
	tw := tar.NewWriter(&buf)
	for _, e := range entries {
		hdr := &tar.Header{Name: e.name, Linkname: e.link, Typeflag: e.typ, Mode: e.mode,
			Size: int64(len(e.body)), ModTime: time.Unix(1700000000, 0)}
		if e.typ != tar.TypeReg {
			hdr.Size = 0
		}
		if err := tw.WriteHeader(hdr); err != nil {
			t.Fatal(err)
		}
		if hdr.Size > 0 {
			if _, err := tw.Write([]byte(e.body)); err != nil {
				t.Fatal(err)
			}
		}
	}
	if err := tw.Close(); err != nil {
		t.Fatal(err)
	}
	return buf.Bytes()
}

func gz(t testing.TB, b []byte) []byte {
	t.Helper()
	var buf bytes.Buffer
	zw := gzip.NewWriter(&buf)
	zw.Write(b)
	if err := zw.Close(); err != nil {
		t.Fatal(err)
	}
	return buf.Bytes()
}

func writeFile(t testing.TB, p string, b []byte) string {
	t.Helper()
	if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(p, b, 0o644); err != nil {
		t.Fatal(err)
	}
	return p
}

// importLayered imports a docker-archive of the two whiteoutLayers, named
// by tags.
func importLayered(t *testing.T, s *Store, tags ...string) []Image {
	t.Helper()
	l1, l2 := whiteoutLayers(t)
	p := writeFile(t, filepath.Join(t.TempDir(), "save.tar"), dockerArchive(t, tags, l1, l2))
	imgs, err := s.Import(context.Background(), p, "")
	if err != nil {
		t.Fatal(err)
	}
	return imgs
}

// reopen closes s and opens its root again; the new store is closed when
// the test ends.
func reopen(t *testing.T, s *Store) *Store {
	t.Helper()
	s.Close()
	s2, err := Open(s.Root(), WithLogger(slog.New(slog.DiscardHandler)))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s2.Close() })
	return s2
}
