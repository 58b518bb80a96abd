package image

import (
	"archive/tar"
	"bytes"
	"context"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"golang.org/x/sys/unix"
)

// fuzzDepth is how deep the target sits below the fuzz base directory, so
// that up to fuzzDepth-1 ".." steps still land inside the base.
const fuzzDepth = 8

// FuzzUnpack feeds layers to unpackLayer and checks that it never panics and
// never creates, changes or links anything outside the target directory.
//
// An input is either "RAW\n" followed by a tar stream, or a script of one
// entry per line: "<type> <name>[ -> <link>][ = <body>]" with type one of
// f (file), d (dir), l (symlink), h (hardlink), p (fifo), c (char device),
// b (block device). Absolute names and links are moved under the base's
// "outside" directory, and inputs with too many ".." steps are skipped, so a
// bug shows up as a change in the base rather than on the host.
func FuzzUnpack(f *testing.F) {
	for _, s := range []string{
		"d etc/\nf etc/passwd = root\nl lib -> usr/lib\nh etc/p2 -> etc/passwd",
		"f ../../escape = x",
		"f /outside-abs = x",
		"l a -> /\nf a/sentinel = pwned",
		"l a -> ../../../../../..\nf a/x = x",
		"d d/\nl d/up -> ..\nl d/up/up2 -> ../..\nf d/up/up2/x = x",
		"h link -> /sentinel",
		"h link -> ../../../../../../../outside/sentinel",
		"f etc/.wh.passwd\nd var/\nf var/.wh..wh..opq",
		"l x -> /\nf x/.wh.sentinel",
		"p fifo\nc dev/null\nb dev/sda",
		"f a = 1\nd a/\nf a/b = 2\nl a -> b\nf a = 3",
	} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		base := t.TempDir()
		dst := base
		for i := range fuzzDepth {
			dst = filepath.Join(dst, "d"+string(rune('0'+i)))
		}
		if err := os.MkdirAll(dst, 0o755); err != nil {
			t.Fatal(err)
		}
		sentinel := writeFile(t, filepath.Join(base, "outside", "sentinel"), []byte("sentinel"))
		layer, ok := fuzzLayer(t, data, base)
		if !ok {
			return
		}
		lim := Limits{MaxLayerBytes: 1 << 20, MaxEntries: 256, MaxFileBytes: 64 << 10}
		_, err := unpackLayer(context.Background(), bytes.NewReader(layer), dst, lim)

		err2 := filepath.WalkDir(base, func(p string, d fs.DirEntry, werr error) error {
			if werr != nil {
				return werr
			}
			if p == dst || strings.HasPrefix(p, dst+"/") || strings.HasPrefix(dst, p+"/") || p == base ||
				p == filepath.Dir(sentinel) || p == sentinel {
				return nil
			}
			t.Errorf("created outside the target: %s", p)
			return nil
		})
		if err2 != nil {
			t.Fatal(err2)
		}
		var st unix.Stat_t
		if err := unix.Lstat(sentinel, &st); err != nil || st.Nlink != 1 || st.Mode&unix.S_IFMT != unix.S_IFREG {
			t.Fatalf("sentinel outside the target changed: %+v %v", st, err)
		}
		if b, _ := os.ReadFile(sentinel); string(b) != "sentinel" {
			t.Fatalf("sentinel rewritten: %q", b)
		}
		if fi, err := os.Lstat(dst); err != nil || !fi.IsDir() {
			t.Fatalf("target replaced: %v %v", fi, err)
		}
		if err != nil {
			return
		}
		// Success: the only device nodes are whiteouts.
		filepath.WalkDir(dst, func(p string, d fs.DirEntry, werr error) error {
			var st unix.Stat_t
			if werr == nil && unix.Lstat(p, &st) == nil {
				typ := st.Mode & unix.S_IFMT
				if typ == unix.S_IFBLK || (typ == unix.S_IFCHR && st.Rdev != 0) {
					t.Errorf("device node %s (mode %o rdev %d)", p, st.Mode, st.Rdev)
				}
			}
			return nil
		})
	})
}

// fuzzLayer turns a fuzz input into a tar stream, or reports false for an
// input that could reach past the base directory if unpacking were broken.
func fuzzLayer(t *testing.T, data []byte, base string) ([]byte, bool) {
	outside := filepath.Join(base, "outside")
	ups := 0
	safe := func(p string) (string, bool) {
		ups += strings.Count(p, "..")
		if strings.HasPrefix(p, "/") {
			p = outside + p
		}
		return p, ups < fuzzDepth
	}
	if raw, ok := bytes.CutPrefix(data, []byte("RAW\n")); ok {
		r, err := decompressed(bytes.NewReader(raw))
		if err != nil {
			return raw, true
		}
		tr := tar.NewReader(r)
		for {
			hdr, err := tr.Next()
			if err != nil {
				break
			}
			if strings.HasPrefix(hdr.Name, "/") || strings.HasPrefix(hdr.Linkname, "/") {
				return nil, false
			}
			if _, ok := safe(hdr.Name); !ok {
				return nil, false
			}
			if _, ok := safe(hdr.Linkname); !ok {
				return nil, false
			}
		}
		return raw, true
	}
	var buf bytes.Buffer
	tw := tar.NewWriter(&buf)
	types := map[byte]byte{'f': tar.TypeReg, 'd': tar.TypeDir, 'l': tar.TypeSymlink, 'h': tar.TypeLink,
		'p': tar.TypeFifo, 'c': tar.TypeChar, 'b': tar.TypeBlock}
	for _, line := range strings.Split(string(data), "\n") {
		if len(line) < 3 || line[1] != ' ' {
			continue
		}
		typ, ok := types[line[0]]
		if !ok {
			continue
		}
		rest, body, _ := strings.Cut(line[2:], " = ")
		name, link, _ := strings.Cut(rest, " -> ")
		if name, ok = safe(name); !ok {
			return nil, false
		}
		if link, ok = safe(link); !ok {
			return nil, false
		}
		hdr := &tar.Header{Name: name, Linkname: link, Typeflag: typ, Mode: 0o644}
		if typ == tar.TypeReg {
			hdr.Size = int64(len(body))
		}
		if err := tw.WriteHeader(hdr); err != nil {
			return nil, false
		}
		if hdr.Size > 0 {
			io.WriteString(tw, body)
		}
	}
	tw.Close()
	return buf.Bytes(), true
}
