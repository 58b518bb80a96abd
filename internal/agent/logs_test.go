package agent

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/shoal-run/shoal/internal/errdefs"
	"github.com/shoal-run/shoal/internal/node"
)

// logNode is a fake node whose replica logs are real files under dir, read
// as the daemon's own node reads them.
type logNode struct {
	*fakeNode
	dir string
}

func (l logNode) TailLog(ctx context.Context, id, log string, n int) (node.LogTail, error) {
	l.call("log %s %s %d", id, log, n)
	return node.ReadLogTail(l.dir, log, n)
}

func (l logNode) FollowLog(ctx context.Context, id, log string, c node.LogCursor) (node.LogTail, error) {
	l.call("follow %s %s %d", id, log, c.Offset)
	return node.FollowLogAt(l.dir, log, c)
}

// writeLog writes lines from..to (inclusive) to path.
func writeLog(t *testing.T, path string, from, to int) {
	t.Helper()
	var b strings.Builder
	for i := from; i <= to; i++ {
		fmt.Fprintf(&b, "line %d\n", i)
	}
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(path, []byte(b.String()), 0o600); err != nil {
		t.Fatal(err)
	}
}

// The leader reads the end of a replica's log on the replica's node: the
// last n lines, reaching into the rotated copy when the log has fewer; a
// log that is not there is not found, and a path outside the node's apps
// folder or not a log is refused.
func TestRemoteTailLog(t *testing.T) {
	ctx := context.Background()
	dir := t.TempDir()
	log := filepath.Join("web", "logs", "web-1.log")
	writeLog(t, filepath.Join(dir, log)+".1", 1, 4)
	writeLog(t, filepath.Join(dir, log), 5, 7)
	r := remoteOf(t, logNode{newFakeNode(), dir}, 0)

	lt, err := r.TailLog(ctx, "web-1", log, 2)
	if err != nil || fmt.Sprint(lt.Lines) != "[line 6 line 7]" || lt.Mod.IsZero() {
		t.Fatalf("last 2 lines: %+v, %v", lt, err)
	}
	lt, err = r.TailLog(ctx, "web-1", log, 5)
	if err != nil || fmt.Sprint(lt.Lines) != "[line 3 line 4 line 5 line 6 line 7]" {
		t.Fatalf("last 5 lines (into the rotated copy): %+v, %v", lt, err)
	}
	if lt, err = r.TailLog(ctx, "web-1", log, 0); err != nil || len(lt.Lines) != 7 {
		t.Fatalf("all lines: %+v, %v", lt, err)
	}
	if _, err := r.TailLog(ctx, "web-2", filepath.Join("web", "logs", "web-2.log"), 5); !errors.Is(err, errdefs.ErrNotFound) {
		t.Fatalf("a log that is not there: %v", err)
	}
	for _, bad := range []string{"../web-1.log", "/etc/passwd", filepath.Join("web", "data", "secret")} {
		if _, err := r.TailLog(ctx, "web-1", bad, 5); !errors.Is(err, errdefs.ErrInvalid) || !contains(err, "log") {
			t.Fatalf("log path %q: %v", bad, err)
		}
	}
}

// The leader follows a replica's log on the replica's node: from the
// cursor its tail left, it reads only the lines written since.
func TestRemoteFollowLog(t *testing.T) {
	ctx := context.Background()
	dir := t.TempDir()
	log := filepath.Join("web", "logs", "web-1.log")
	writeLog(t, filepath.Join(dir, log), 1, 3)
	r := remoteOf(t, logNode{newFakeNode(), dir}, 0)
	lt, err := r.TailLog(ctx, "web-1", log, 1)
	if err != nil || fmt.Sprint(lt.Lines) != "[line 3]" || lt.Cursor.Offset == 0 {
		t.Fatalf("tail: %+v, %v", lt, err)
	}
	f, err := os.OpenFile(filepath.Join(dir, log), os.O_WRONLY|os.O_APPEND, 0)
	if err != nil {
		t.Fatal(err)
	}
	fmt.Fprintln(f, "line 4")
	f.Close()
	ft, err := r.FollowLog(ctx, "web-1", log, lt.Cursor)
	if err != nil || fmt.Sprint(ft.Lines) != "[line 4]" || ft.Cursor.Offset <= lt.Cursor.Offset {
		t.Fatalf("follow: %+v, %v", ft, err)
	}
	if ft, err = r.FollowLog(ctx, "web-1", log, ft.Cursor); err != nil || len(ft.Lines) != 0 {
		t.Fatalf("follow again: %+v, %v", ft, err)
	}
	if _, err := r.FollowLog(ctx, "web-1", "../x.log", ft.Cursor); !errors.Is(err, errdefs.ErrInvalid) {
		t.Fatalf("follow outside the apps folder: %v", err)
	}
}

// A node whose Node cannot read logs answers unavailable, and a caller
// without the cluster secret reads nothing.
func TestRemoteTailLogRefused(t *testing.T) {
	ctx := context.Background()
	r := remoteOf(t, newFakeNode(), 0)
	if _, err := r.TailLog(ctx, "web-1", "web/logs/web-1.log", 5); !errors.Is(err, errdefs.ErrUnavailable) {
		t.Fatalf("node without logs: %v", err)
	}
	dir := t.TempDir()
	writeLog(t, filepath.Join(dir, "web", "logs", "web-1.log"), 1, 3)
	st := testStore(t)
	srv := serve(t, (&Server{Name: "n2", Secret: testSecret, Node: logNode{newFakeNode(), dir}, Log: testLog(t)}).Handler())
	addNode(t, st, "n2", srv)
	bad := NewClient(st, "another-secret-another").Remote("n2")
	if lt, err := bad.TailLog(ctx, "web-1", "web/logs/web-1.log", 5); err == nil || len(lt.Lines) != 0 {
		t.Fatalf("without the secret: %+v, %v", lt, err)
	}
}
