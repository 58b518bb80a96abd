package image

import (
	"archive/tar"
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/shoal-run/shoal/internal/errdefs"
)

func TestParseReference(t *testing.T) {
	good := map[string][2]string{
		"busybox":                    {"busybox", "latest"},
		"busybox:1.36":               {"busybox", "1.36"},
		"library/busybox:v1_x-y":     {"library/busybox", "v1_x-y"},
		"127.0.0.1:5000/a/b:c":       {"127.0.0.1:5000/a/b", "c"},
		"localhost/app":              {"localhost/app", "latest"},
		"registry.example.com/a__b":  {"registry.example.com/a__b", "latest"},
		"ghcr.io/Org-Not-Lower/x:1":  {"", ""},
		"a--b.c_d:TAG":               {"a--b.c_d", "TAG"},
		"quay.io:443/ns/img:1.0-rc1": {"quay.io:443/ns/img", "1.0-rc1"},
	}
	for in, want := range good {
		n, tag, err := ParseReference(in)
		if want[0] == "" {
			if err == nil {
				t.Errorf("%q accepted", in)
			}
			continue
		}
		if err != nil || n != want[0] || tag != want[1] {
			t.Errorf("ParseReference(%q) = %q, %q, %v", in, n, tag, err)
		}
	}
	for _, in := range []string{"", "UPPER", "a b", "a:", ":tag", "a:-tag", "a//b", "/a", "a/", "a@sha256:00",
		"a:" + strings.Repeat("t", 129), "-a", "a..b", "host:port/x", strings.Repeat("a", 256)} {
		if _, _, err := ParseReference(in); !errdefs.IsInvalid(err) || errdefs.Field(err) != "reference" {
			t.Errorf("ParseReference(%q) = %v, want invalid reference", in, err)
		}
	}
}

// seeded returns a store holding one image, so "unchanged" means something.
func seeded(t *testing.T, opts ...Option) (*Store, state) {
	t.Helper()
	s := newStore(t, opts...)
	if _, err := s.Build(context.Background(), buildDir(t), BuildOptions{Tag: "seed:1"}); err != nil {
		t.Fatal(err)
	}
	return s, diskState(t, s)
}

func TestBadInputLeavesStoreUnchanged(t *testing.T) {
	ctx := context.Background()
	okLayer := makeTar(t, reg("ok", "ok"))
	tmp := t.TempDir()
	archive := func(name string, layers ...[]byte) string {
		return writeFile(t, filepath.Join(tmp, name+".tar"), dockerArchive(t, []string{"bad:1"}, layers...))
	}
	truncated := dockerArchive(t, []string{"bad:1"}, okLayer, makeTar(t, reg("big", strings.Repeat("x", 10000))))
	corruptLayer := makeTar(t, reg("a", strings.Repeat("x", 3000)))[:1500]

	cases := []struct {
		name string
		path string
		tag  string
		want string // in the error
	}{
		{"missing file", filepath.Join(tmp, "nope.tar"), "", "no such file"},
		{"unreadable file", "/proc/self/mem", "x:1", "not a readable tar"},
		{"not an image dir", t.TempDir(), "", "neither an OCI image layout"},
		{"garbage", writeFile(t, filepath.Join(tmp, "garbage"), []byte(strings.Repeat("garbage!", 200))), "x:1", "not a readable tar"},
		{"truncated archive", writeFile(t, filepath.Join(tmp, "trunc.tar"), truncated[:len(truncated)-3000]), "", "unexpected EOF"},
		{"corrupt layer", archive("corrupt", okLayer, corruptLayer), "", "layer sha256:"},
		{"bad tag", archive("badtag", okLayer), "Bad:Tag", "reference"},
		{"dotdot", archive("dotdot", okLayer, makeTar(t, reg("../../etc/passwd", "x"))), "", `entry "../../etc/passwd": escapes the root`},
		{"absolute", archive("abs", makeTar(t, reg("/etc/shadow", "x"))), "", `entry "/etc/shadow"`},
		{"symlink parent", archive("symabs", okLayer, makeTar(t, symlink("a", "/etc"), reg("a/passwd", "x"))), "", `entry "a/passwd": escapes the root`},
		{"symlink up", archive("symrel", makeTar(t, symlink("a", "../../.."), reg("a/x", "x"))), "", `entry "a/x": escapes the root`},
		{"hardlink out", archive("hlout", makeTar(t, hardlink("h", "../../../etc/passwd"))), "", `entry "h": hardlink target`},
		{"hardlink missing", archive("hlmiss", makeTar(t, hardlink("h", "nothing"))), "", `entry "h": hardlink target "nothing" does not exist`},
		{"device", archive("dev", makeTar(t, entry{name: "srv/kmem", typ: tar.TypeChar, mode: 0o600})), "", `entry "srv/kmem": device nodes`},
		{"rootfs escape", writeFile(t, filepath.Join(tmp, "rootfs.tar"), makeTar(t, reg("../x", "x"))), "r:1", `entry "../x"`},
	}
	s, before := seeded(t)
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			imgs, err := s.Import(ctx, c.path, c.tag)
			if err == nil {
				t.Fatalf("imported %+v", imgs)
			}
			if !strings.Contains(err.Error(), c.want) {
				t.Fatalf("error %q does not say %q", err, c.want)
			}
			assertUnchanged(t, s, before)
			if _, err := s.Get(ctx, "bad:1"); !errdefs.IsNotFound(err) {
				t.Fatalf("bad:1 is known: %v", err)
			}
		})
	}
}

func TestDigestMismatch(t *testing.T) {
	ctx := context.Background()
	layout := umociLayout(t)
	s, before := seeded(t)
	// Flip a byte in a layer.
	biggest := biggestBlob(t, layout)
	data, _ := os.ReadFile(biggest)
	data[len(data)/2] ^= 0xff
	os.WriteFile(biggest, data, 0o644)
	if _, err := s.Import(ctx, layout, ""); err == nil || !strings.Contains(err.Error(), "digest mismatch") {
		t.Fatalf("import of a corrupted blob: %v", err)
	}
	assertUnchanged(t, s, before)

	// Diff IDs in the config that do not match the layer.
	l1, l2 := whiteoutLayers(t)
	a := dockerArchive(t, []string{"bad:1"}, l1, l2)
	bad := strings.Replace(string(a), digestOf(l2), digestOf(l1), 1)
	p := writeFile(t, filepath.Join(t.TempDir(), "d.tar"), []byte(bad))
	if _, err := s.Import(ctx, p, ""); err == nil || !strings.Contains(err.Error(), "diff ID mismatch") {
		t.Fatalf("import with wrong diff IDs: %v", err)
	}
	assertUnchanged(t, s, before)
}

// biggestBlob is the largest blob of an OCI layout: a layer its image uses.
func biggestBlob(t *testing.T, layout string) string {
	t.Helper()
	blobs, _ := filepath.Glob(filepath.Join(layout, "blobs/sha256/*"))
	var biggest string
	var size int64
	for _, b := range blobs {
		if fi, _ := os.Stat(b); fi.Size() > size {
			biggest, size = b, fi.Size()
		}
	}
	if biggest == "" {
		t.Fatalf("no blobs in %s", layout)
	}
	return biggest
}

func TestLimitsOnImport(t *testing.T) {
	ctx := context.Background()
	s, before := seeded(t, WithLimits(Limits{MaxLayerBytes: 1 << 20, MaxEntries: 100}))
	bomb := gz(t, makeTar(t, reg("zeros", strings.Repeat("\x00", 2<<20))))
	p := writeFile(t, filepath.Join(t.TempDir(), "bomb.tar.gz"), bomb)
	if _, err := s.Import(ctx, p, "bomb:1"); err == nil || !strings.Contains(err.Error(), "limit") {
		t.Fatalf("gzip bomb: %v", err)
	}
	assertUnchanged(t, s, before)
	var many []entry
	for i := range 101 {
		many = append(many, reg("f"+strings.Repeat("x", i%7)+string(rune('a'+i%26))+"-"+strings.Repeat("y", i), ""))
	}
	p = writeFile(t, filepath.Join(t.TempDir(), "many.tar"), dockerArchive(t, nil, makeTar(t, many...)))
	if _, err := s.Import(ctx, p, "many:1"); err == nil || !strings.Contains(err.Error(), "more than 100 entries") {
		t.Fatalf("entry bomb: %v", err)
	}
	assertUnchanged(t, s, before)
}

func TestBuildBadInput(t *testing.T) {
	ctx := context.Background()
	s, before := seeded(t)
	d := buildDir(t)
	for _, c := range []struct {
		o     BuildOptions
		field string
	}{
		{BuildOptions{Tag: "UP:1"}, "reference"},
		{BuildOptions{Tag: "a:1", Env: []string{"NOEQUALS"}}, "env"},
		{BuildOptions{Tag: "a:1", Workdir: "rel"}, "workdir"},
		{BuildOptions{Tag: "a:1", Ports: []int{70000}}, "port"},
	} {
		if _, err := s.Build(ctx, d, c.o); errdefs.Field(err) != c.field {
			t.Errorf("Build(%+v) = %v, want invalid %s", c.o, err, c.field)
		}
	}
	if _, err := s.Build(ctx, filepath.Join(d, "missing"), BuildOptions{Tag: "a:1"}); err == nil {
		t.Error("build of a missing folder")
	}
	if _, err := s.Build(ctx, "/dev", BuildOptions{Tag: "a:1"}); err == nil || !strings.Contains(err.Error(), "device") {
		t.Errorf("build of a folder with devices: %v", err)
	}
	assertUnchanged(t, s, before)
}
