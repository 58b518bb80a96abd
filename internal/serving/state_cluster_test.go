package serving

import (
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
)

// A replica on another node leaves a state area there: when it goes, the
// leader fetches the area's regular files (not the symlink or FIFO the
// app planted), merges them into its volume as for its own replicas, and
// the node's copy is removed.
func TestClusterStateMergedFromNode(t *testing.T) {
	h := newClusterHarness(t)
	h.lead()
	h.deploy("min = 3\nmax = 3", stateTables+"merge = \"append\"")
	h.wait("3 ready replicas", func() bool { return len(h.replicas()["ready"]) == 3 })
	var id string
	// Records are written in the background; one replica goes to each node.
	h.wait("a record of a replica on n2", func() bool {
		for rid, n := range h.nodesOf() {
			if n == "n2" {
				id = rid
			}
		}
		return id != ""
	})
	n2 := h.remote["n2"]
	c, err := n2.rt.get(id)
	if err != nil {
		t.Fatal(err)
	}
	var src string
	for _, mt := range c.spec.Mounts {
		if mt.Destination == "/state" {
			src = mt.Source
		}
	}
	if !strings.HasPrefix(src, n2.dir) {
		t.Fatalf("state mount %q is not under n2's apps folder %s", src, n2.dir)
	}
	writeTree(t, src, map[string]string{"access.log": id + " 1\n", "sub/x": "x\n"})
	secret := filepath.Join(n2.dir, "secret")
	if err := os.WriteFile(secret, []byte("host secret\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink(secret, filepath.Join(src, "link")); err != nil {
		t.Fatal(err)
	}
	if err := syscall.Mkfifo(filepath.Join(src, "pipe"), 0o644); err != nil {
		t.Fatal(err)
	}

	n2.rt.exit(id, 1)
	h.wait("the replica's state is merged on the leader", func() bool { return len(h.merged("merge", id)) == 1 })
	if e := h.merged("merge", id)[0]; e.Inputs["files"] != 2 {
		t.Fatalf("merge event %+v; want 2 files", e)
	}
	if got := readFile(t, filepath.Join(h.volume(), "access.log")); got != id+" 1\n" {
		t.Fatalf("merged log %q", got)
	}
	if got := readFile(t, filepath.Join(h.volume(), "sub", "x")); got != "x\n" {
		t.Fatalf("merged sub/x %q", got)
	}
	for _, name := range []string{"link", "pipe"} {
		if _, err := os.Lstat(filepath.Join(h.volume(), name)); !os.IsNotExist(err) {
			t.Fatalf("%s reached the volume: %v", name, err)
		}
	}
	if _, err := os.Lstat(filepath.Dir(src)); !os.IsNotExist(err) {
		t.Fatalf("the state area stays on n2: %v", err)
	}
	if got := readFile(t, secret); got != "host secret\n" {
		t.Fatalf("the symlink's target was touched: %q", got)
	}
}
