package agent

import (
	"context"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"syscall"
	"testing"
	"time"

	"github.com/shoal-run/shoal/internal/statemerge"
)

// stateNode is a fake node whose state areas are real directories under
// dir, sent as the daemon's own node sends them.
type stateNode struct {
	*fakeNode
	dir string
}

func (s stateNode) SendState(ctx context.Context, id, area string, w io.Writer) error {
	s.call("state %s %s", id, area)
	if !filepath.IsLocal(area) {
		return fmt.Errorf("path %q is not under the apps folder", area)
	}
	_, err := statemerge.WriteTar(filepath.Join(s.dir, area), w, 1<<20)
	return err
}

func (s stateNode) DropState(ctx context.Context, id, area string) error {
	s.call("drop %s %s", id, area)
	return os.RemoveAll(filepath.Join(s.dir, area))
}

// The leader fetches a replica's state area from its node: the regular
// files come with their bytes and times; a symlink to a file outside the
// area and a FIFO (which would hang a reader that opened it) are left
// out, not followed; then the node drops the area.
func TestRemoteFetchState(t *testing.T) {
	ctx := context.Background()
	dir := t.TempDir()
	data := filepath.Join(dir, "web", "state", "live", "web-1", "data")
	if err := os.MkdirAll(filepath.Join(data, "sub"), 0o755); err != nil {
		t.Fatal(err)
	}
	secret := filepath.Join(dir, "secret")
	os.WriteFile(secret, []byte("host secret"), 0o600)
	os.WriteFile(filepath.Join(data, "a.log"), []byte("one\ntwo\n"), 0o644)
	os.WriteFile(filepath.Join(data, "sub", "b.txt"), []byte("bee"), 0o600)
	when := time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)
	os.Chtimes(filepath.Join(data, "sub", "b.txt"), when, when)
	if err := os.Symlink(secret, filepath.Join(data, "link")); err != nil {
		t.Fatal(err)
	}
	if err := syscall.Mkfifo(filepath.Join(data, "pipe"), 0o644); err != nil {
		t.Fatal(err)
	}
	r := remoteOf(t, stateNode{newFakeNode(), dir}, 0)

	dst := t.TempDir()
	if err := r.FetchState(ctx, "web-1", filepath.Join("web", "state", "live", "web-1", "data"), dst); err != nil {
		t.Fatal(err)
	}
	if b, err := os.ReadFile(filepath.Join(dst, "a.log")); err != nil || string(b) != "one\ntwo\n" {
		t.Fatalf("a.log: %q, %v", b, err)
	}
	fi, err := os.Stat(filepath.Join(dst, "sub", "b.txt"))
	if err != nil || !fi.ModTime().Equal(when) || fi.Mode().Perm() != 0o600 {
		t.Fatalf("sub/b.txt: %v, %v", fi, err)
	}
	for _, name := range []string{"link", "pipe", "secret"} {
		if _, err := os.Lstat(filepath.Join(dst, name)); !os.IsNotExist(err) {
			t.Errorf("%s was fetched: %v", name, err)
		}
	}

	if err := r.FetchState(ctx, "web-1", "../etc", t.TempDir()); err == nil || !contains(err, "not under the apps folder") {
		t.Fatalf("area outside the apps folder: %v", err)
	}
	if err := r.DropState(ctx, "web-1", filepath.Join("web", "state", "live", "web-1")); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Lstat(filepath.Join(dir, "web", "state", "live", "web-1")); !os.IsNotExist(err) {
		t.Fatalf("area left on the node: %v", err)
	}
	if b, err := os.ReadFile(secret); err != nil || string(b) != "host secret" {
		t.Fatalf("the symlink's target was touched: %q, %v", b, err)
	}
}
