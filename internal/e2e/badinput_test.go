package e2e

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

func TestBadInput(t *testing.T) {
	d := startDaemon(t)
	d.busybox("busybox:1")
	cases := []struct {
		name string
		args []string
		code int
		want string // in stderr
	}{
		{"unknown image", []string{"run", "--rm", "nosuch:1", "true"}, 1, `"nosuch:1"`},
		{"malformed reference", []string{"run", "--rm", "Bad Ref::", "true"}, 2, "reference"},
		{"bad memory", []string{"run", "--memory", "lots", "busybox:1", "true"}, 2, "--memory"},
		{"negative cpus", []string{"run", "--cpus", "-1", "busybox:1", "true"}, 2, "--cpus"},
		{"bad network", []string{"run", "--network", "wifi", "busybox:1", "true"}, 2, "--network"},
		{"bad timeout", []string{"run", "--timeout", "soon", "busybox:1", "true"}, 2, "--timeout"},
		{"unknown command", []string{"frobnicate"}, 2, "unknown command"},
		{"unknown flag", []string{"run", "--frobnicate", "busybox:1"}, 2, "frobnicate"},
		{"missing image arg", []string{"run"}, 2, "argument"},
		{"unreadable import", []string{"image", "import", "/nonexistent/image.tar"}, 2, "/nonexistent/image.tar"},
		{"build without tag", []string{"image", "build", "/tmp"}, 2, "--tag"},
		{"build bad tag", []string{"image", "build", "/tmp", "--tag", "UPPER:x"}, 2, "reference"},
		{"inspect unknown", []string{"image", "inspect", "nosuch:2"}, 1, "nosuch:2"},
		{"bad output", []string{"ps", "-o", "yaml"}, 2, "--output"},
		{"rm unknown", []string{"rm", "feedfacecafe"}, 1, "feedfacecafe"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			r := d.shoal(c.args...)
			if r.code != c.code || !strings.Contains(r.stderr, c.want) {
				t.Fatalf("shoal %v: code %d stderr %q; want code %d and %q", c.args, r.code, r.stderr, c.code, c.want)
			}
		})
	}
	t.Run("a refused import keeps nothing", func(t *testing.T) {
		bad := filepath.Join(t.TempDir(), "bad.tar")
		if err := os.WriteFile(bad, []byte("this is not a tar file at all, not even close"), 0o644); err != nil {
			t.Fatal(err)
		}
		before := d.must("image", "ls", "-o", "json")
		r := d.shoal("image", "import", bad, "--tag", "bad:1")
		if r.code == 0 {
			t.Fatalf("importing garbage succeeded: %q", r.stdout)
		}
		if after := d.must("image", "ls", "-o", "json"); after != before {
			t.Fatalf("image list changed after a refused import:\n%s\n%s", before, after)
		}
	})
}
