package statemerge

import (
	"archive/tar"
	"bytes"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// ReadTar takes regular files under its directory only, and no more than
// its bound: a symlink entry, a name that leaves the directory and a tar
// larger than the bound are refused, and nothing is written outside.
func TestReadTarRefuses(t *testing.T) {
	entry := func(h tar.Header, body string) []byte {
		var b bytes.Buffer
		tw := tar.NewWriter(&b)
		h.Size = int64(len(body))
		if h.Typeflag == tar.TypeSymlink {
			h.Size = 0
			body = ""
		}
		if err := tw.WriteHeader(&h); err != nil {
			t.Fatal(err)
		}
		tw.Write([]byte(body))
		tw.Close()
		return b.Bytes()
	}
	for _, c := range []struct {
		name string
		tar  []byte
		max  int64
		want string
	}{
		{"symlink", entry(tar.Header{Typeflag: tar.TypeSymlink, Name: "l", Linkname: "/etc/passwd"}, ""), 1 << 20, "not a regular file"},
		{"leaves", entry(tar.Header{Typeflag: tar.TypeReg, Name: "../out", Mode: 0o644}, "x"), 1 << 20, "not a regular file under the area"},
		{"absolute", entry(tar.Header{Typeflag: tar.TypeReg, Name: "/tmp/out", Mode: 0o644}, "x"), 1 << 20, "not a regular file under the area"},
		{"too large", entry(tar.Header{Typeflag: tar.TypeReg, Name: "big", Mode: 0o644}, "0123456789"), 4, "larger than the bound"},
	} {
		parent := t.TempDir()
		dst := filepath.Join(parent, "data")
		os.Mkdir(dst, 0o755)
		_, err := ReadTar(bytes.NewReader(c.tar), dst, c.max)
		if err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%s: %v; want %q", c.name, err, c.want)
		}
		if ents, _ := os.ReadDir(dst); len(ents) != 0 {
			t.Errorf("%s: written %v", c.name, ents)
		}
		if _, err := os.Lstat(filepath.Join(parent, "out")); !os.IsNotExist(err) {
			t.Errorf("%s: wrote outside: %v", c.name, err)
		}
	}
}
