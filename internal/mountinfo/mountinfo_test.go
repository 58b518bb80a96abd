package mountinfo

import (
	"os"
	"path/filepath"
	"reflect"
	goruntime "runtime"
	"strings"
	"testing"

	"golang.org/x/sys/unix"
)

func fixture(t *testing.T) []Mount {
	t.Helper()
	f, err := os.Open(filepath.Join("testdata", "mountinfo"))
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	ms, err := Parse(f)
	if err != nil {
		t.Fatal(err)
	}
	return ms
}

func TestParse(t *testing.T) {
	ms := fixture(t)
	if len(ms) != 10 {
		t.Fatalf("%d mounts, want 10", len(ms))
	}
	want := map[int]Mount{
		22: {ID: 22, Parent: 1, Dev: "8:1", Root: "/", Point: "/", Options: "rw,relatime",
			Optional: []string{"shared:1"}, FSType: "ext4", Source: "/dev/sda1", SuperOptions: "rw,errors=remount-ro"},
		40: {ID: 40, Parent: 31, Dev: "0:37", Root: "/kube", Point: "/sys/fs/cgroup/with space", Options: "rw,relatime",
			Optional: []string{"master:3", "shared:9"}, FSType: "cgroup", Source: "cgroup", SuperOptions: "rw,xattr,name=systemd"},
		41: {ID: 41, Parent: 31, Dev: "0:38", Root: "/", Point: "/sys/fs/cgroup/unified", Options: "rw,relatime",
			FSType: "cgroup2", Source: "cgroup2", SuperOptions: "rw"},
		53: {ID: 53, Parent: 22, Dev: "0:48", Root: "/", Point: "/run/netns/tab\tand\nnewline\\back", Options: "rw",
			FSType: "nsfs", Source: "nsfs", SuperOptions: "rw"},
		54: {ID: 54, Parent: 22, Dev: "0:49", Root: "/", Point: "/mnt/empty source", Options: "rw",
			FSType: "tmpfs", Source: "", SuperOptions: "rw,size=1k"},
	}
	for _, m := range ms {
		if w, ok := want[m.ID]; ok && !reflect.DeepEqual(m, w) {
			t.Errorf("mount %d:\n got %+v\nwant %+v", m.ID, m, w)
		}
	}
}

func TestParseErrors(t *testing.T) {
	for _, in := range []string{
		"22 1 8:1 / / rw\n",                    // no separator
		"x 1 8:1 / / rw - ext4 /dev/sda1 rw\n", // bad id
		"22 y 8:1 / / rw - ext4 /dev/sda1 rw\n",
		"22 1 8:1 / / rw - ext4\n", // missing source and options
	} {
		if _, err := Parse(strings.NewReader(in)); err == nil || !strings.Contains(err.Error(), "line 1") {
			t.Errorf("%q: error %v, want one naming line 1", in, err)
		}
	}
	ms, err := Parse(strings.NewReader(""))
	if err != nil || len(ms) != 0 {
		t.Fatalf("empty input: %v %v", ms, err)
	}
}

func TestUnescape(t *testing.T) {
	tests := map[string]string{
		`plain`:            "plain",
		`a\040b`:           "a b",
		`\011\012\134`:     "\t\n\\",
		`trailing\04`:      `trailing\04`,
		`not\999octal`:     `not\999octal`,
		`\400`:             `\400`, // above a byte
		`end\040`:          "end ",
		`two\040\040space`: "two  space",
	}
	for in, want := range tests {
		if got := Unescape(in); got != want {
			t.Errorf("Unescape(%q) = %q, want %q", in, got, want)
		}
	}
}

func TestUnder(t *testing.T) {
	ms := fixture(t)
	points := func(ms []Mount) []string {
		var out []string
		for _, m := range ms {
			out = append(out, m.Point)
		}
		return out
	}
	tests := []struct {
		dir  string
		want []string
	}{
		{"/var/lib/shoal/containers/a", []string{"/var/lib/shoal/containers/a/rootfs", "/var/lib/shoal/containers/a/rootfs/proc"}},
		{"/var/lib/shoal/containers/a/", []string{"/var/lib/shoal/containers/a/rootfs", "/var/lib/shoal/containers/a/rootfs/proc"}},
		{"/var/lib/shoal/containers/ab/rootfs", []string{"/var/lib/shoal/containers/ab/rootfs"}},
		{"/sys/fs/cgroup/with space", []string{"/sys/fs/cgroup/with space"}},
		{"/nowhere", nil},
	}
	for _, tc := range tests {
		if got := points(Under(ms, tc.dir)); !reflect.DeepEqual(got, tc.want) {
			t.Errorf("Under(%q) = %q, want %q", tc.dir, got, tc.want)
		}
	}
	if got := Under(ms, "/"); len(got) != len(ms) {
		t.Errorf("Under(/) = %d mounts, want all %d", len(got), len(ms))
	}
}

// TestSelf reads this process's real mount table.
func TestSelf(t *testing.T) {
	ms, err := Self()
	if err != nil {
		t.Fatal(err)
	}
	root := false
	for _, m := range ms {
		root = root || m.Point == "/"
	}
	if !root {
		t.Fatalf("no root mount among %d", len(ms))
	}
	if ok, err := IsMountPoint("/proc"); err != nil || !ok {
		t.Fatalf("IsMountPoint(/proc) = %v, %v", ok, err)
	}
	if ok, err := IsMountPoint("/proc/self"); err != nil || ok {
		t.Fatalf("IsMountPoint(/proc/self) = %v, %v", ok, err)
	}
	if ps, err := MountsUnder("/proc"); err != nil || len(ps) == 0 || ps[0] != "/proc" {
		t.Fatalf("MountsUnder(/proc) = %q, %v", ps, err)
	}
}

// TestSelfThread: Self shows the calling thread's mount namespace, the one
// its unmounts act on, not the main thread's. A thread of its own (not the
// main one) unshares its mount namespace and mounts a tmpfs there: Self
// called on it lists the tmpfs, and on any other thread does not.
func TestSelfThread(t *testing.T) {
	dir := t.TempDir()
	type seen struct {
		in  []string
		err error
	}
	res := make(chan seen, 1)
	var onThread func()
	onThread = func() {
		goruntime.LockOSThread() // never unlocked: the thread ends with the goroutine
		if unix.Gettid() == unix.Getpid() {
			// The main thread: hold it while another thread does it.
			done := make(chan struct{})
			go func() { onThread(); close(done) }()
			<-done
			goruntime.UnlockOSThread()
			return
		}
		if err := unix.Unshare(unix.CLONE_NEWNS); err != nil {
			res <- seen{err: err}
			return
		}
		if err := unix.Mount("", "/", "", unix.MS_REC|unix.MS_PRIVATE, ""); err != nil {
			res <- seen{err: err}
			return
		}
		if err := unix.Mount("tmpfs", dir, "tmpfs", 0, "size=64k"); err != nil {
			res <- seen{err: err}
			return
		}
		ps, err := MountsUnder(dir)
		res <- seen{ps, err}
	}
	go onThread()
	s := <-res
	if s.err != nil {
		t.Fatal(s.err)
	}
	if len(s.in) != 1 || s.in[0] != dir {
		t.Fatalf("on the thread that mounted it: MountsUnder(%s) = %q, want the tmpfs", dir, s.in)
	}
	if ps, err := MountsUnder(dir); err != nil || len(ps) != 0 {
		t.Fatalf("on another thread: MountsUnder(%s) = %q, %v, want none", dir, ps, err)
	}
}
