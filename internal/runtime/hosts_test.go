package runtime

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestHostsNameTheContainer: a container's hostname has a line in its
// /etc/hosts (Apache's AH00557 when it has none), next to the image's own
// lines; an image with an /etc but no /etc/hosts gets localhost's too; a
// read-only root file system is not written; in a user namespace the
// file made is the namespace root's.
func TestHostsNameTheContainer(t *testing.T) {
	r := newTestRuntime(t, nil)
	const show = `hostname; cat /etc/hosts`
	s := baseSpec(t, "sh", "-c", show)
	s.Hostname = "web-1"
	st, out, errOut := capture(t, r, s)
	if st.Code != 0 || !strings.HasPrefix(out, "web-1\n") || !strings.Contains(out, "127.0.0.1\tlocalhost\n") ||
		!strings.Contains(out, "127.0.1.1\tweb-1\n") {
		t.Fatalf("an image without /etc/hosts: %+v %q %q", st, out, errOut)
	}

	own := t.TempDir()
	if err := os.MkdirAll(filepath.Join(own, "etc"), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(own, "etc", "hosts"), []byte("127.0.0.1 localhost\n10.9.9.9 db"), 0o644); err != nil {
		t.Fatal(err)
	}
	s = baseSpec(t, "sh", "-c", show)
	s.Layers = append(s.Layers, own)
	st, out, errOut = capture(t, r, s)
	if want := s.ID + "\n127.0.0.1 localhost\n10.9.9.9 db\n127.0.1.1\t" + s.ID + "\n"; st.Code != 0 || out != want {
		t.Fatalf("an image with /etc/hosts: %+v %q %q, want %q", st, out, errOut, want)
	}

	const host = 3000000000
	if err := UserNSUsable(host, 65536); err != nil {
		t.Fatal(err)
	}
	s = baseSpec(t, "sh", "-c", "stat -c %u:%g /etc/hosts; grep -c web-2 /etc/hosts")
	s.Hostname, s.UserNS = "web-2", &UserNS{HostID: host, Size: 65536}
	if st, out, errOut = capture(t, r, s); st.Code != 0 || out != "0:0\n1\n" {
		t.Fatalf("in a user namespace: %+v %q %q", st, out, errOut)
	}

	s = baseSpec(t, "sh", "-c", show)
	s.Layers, s.ReadOnlyRootfs = append(s.Layers, own), true
	st, out, errOut = capture(t, r, s)
	if want := s.ID + "\n127.0.0.1 localhost\n10.9.9.9 db"; st.Code != 0 || out != want {
		t.Fatalf("a read-only root file system: %+v %q %q, want %q", st, out, errOut, want)
	}
}

func TestNamesHost(t *testing.T) {
	hosts := []byte("# web-1 in a comment\n127.0.0.1 localhost\n10.0.0.1\tdb  web-2 # web-3\n")
	for name, want := range map[string]bool{"web-1": false, "web-2": true, "web-3": false, "db": true, "10.0.0.1": false, "localhost": true} {
		if got := namesHost(hosts, name); got != want {
			t.Errorf("namesHost(%q) = %v, want %v", name, got, want)
		}
	}
}
