package e2e

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/shoal-run/shoal/internal/api/types"
)

// stateApp is a busybox app of three replicas whose command first runs
// boot (as each replica starts), then serves /data with httpd; with
// min = 0 and short timeouts, `app scale --min 0` freezes and then stops
// every replica. (The shell stays as PID 1 to pass SIGTERM on to httpd.)
func stateApp(name, boot, state string) string {
	return fmt.Sprintf(`
name = %q
image = "busybox:1"
command = ["sh", "-c", %q]
[scale]
min = 3
idle_timeout = "300ms"
freeze_timeout = "1s"
[volumes]
data = "/data"
[state]
dir = "/state"
%s
`, name, boot+"; httpd -f -p 8080 -h /data & trap 'kill $!; exit' TERM; wait", state)
}

// scaleDownAndMerge scales app to zero and waits until every replica in
// ids has had its state merged; it returns the merge events.
func (d *daemon) scaleDownAndMerge(app string, ids []string) []types.Event {
	d.t.Helper()
	d.must("app", "scale", app, "--min", "0")
	d.waitApp(app, "every replica stops", func(a types.App) bool { return len(a.Replicas) == 0 })
	var merged []types.Event
	waitFor(d.t, "every replica's state is merged", func() bool {
		merged = merged[:0]
		if failed := d.events(app, "merge-failed"); len(failed) > 0 {
			d.t.Fatalf("merge failed: %+v", failed)
		}
		for _, e := range d.events(app, "merge") {
			if slices.Contains(ids, e.Replica) {
				merged = append(merged, e)
			}
		}
		return len(merged) == len(ids)
	})
	for _, e := range merged {
		d.t.Logf("merge of %s: %v files, %v bytes in %.1f ms", e.Replica, e.Inputs["files"], e.Inputs["bytes"], e.Inputs["seconds"]*1000)
	}
	state := filepath.Join(d.dataDir, "apps", app, "state")
	for _, sub := range []string{"live", "gone"} {
		if ents, _ := os.ReadDir(filepath.Join(state, sub)); len(ents) != 0 {
			d.t.Fatalf("state areas left in %s after the merges: %v", sub, ents)
		}
	}
	return merged
}

func (d *daemon) volumeFile(app, rel string) string {
	d.t.Helper()
	b, err := os.ReadFile(filepath.Join(d.dataDir, "apps", app, "volumes", "data", rel))
	if err != nil {
		d.t.Fatal(err)
	}
	return string(b)
}

func replicaIDs(a types.App) []string {
	var ids []string
	for _, r := range a.Replicas {
		ids = append(ids, r.ID)
	}
	return ids
}

// Three replicas append their own lines to a log under /state; the app
// scales to zero, and every replica's lines are in the shared volume
// exactly once, after what was there before.
func TestAppStateAppend(t *testing.T) {
	d := startDaemon(t)
	d.busybox("busybox:1")
	const app = "logs"
	vol := filepath.Join(d.dataDir, "apps", app, "volumes", "data", "log")
	if err := os.MkdirAll(vol, 0o755); err != nil {
		t.Fatal(err)
	}
	os.WriteFile(filepath.Join(vol, "access.log"), []byte("before\n"), 0o644)
	// Each replica also plants a symlink out of its state, which the merge
	// must not follow.
	d.deploy(stateApp(app, `mkdir -p /state/log; for i in 1 2 3 4 5; do echo "$SHOAL_REPLICA line $i" >> /state/log/access.log; done; ln -s /etc/passwd /state/log/passwd`,
		`merge = "append"`))
	a := d.waitApp(app, "three ready replicas", func(a types.App) bool { return a.Ready == 3 })
	ids := replicaIDs(a)
	merged := d.scaleDownAndMerge(app, ids)
	for _, e := range merged {
		if e.Inputs["files"] != 1 || e.Inputs["bytes"] != float64(5*len(e.Replica+" line 1\n")) ||
			e.Inputs["skipped"] != 1 || !strings.Contains(e.Reason, "log/passwd (symlink)") {
			t.Errorf("merge event %+v", e)
		}
	}
	if _, err := os.Lstat(filepath.Join(vol, "passwd")); err == nil {
		t.Fatal("a replica's symlink reached the volume")
	}
	log := d.volumeFile(app, "log/access.log")
	if !strings.HasPrefix(log, "before\n") || strings.Count(log, "\n") != 1+3*5 {
		t.Fatalf("merged log:\n%s", log)
	}
	for _, id := range ids {
		for i := 1; i <= 5; i++ {
			if n := strings.Count(log, fmt.Sprintf("%s line %d\n", id, i)); n != 1 {
				t.Fatalf("%s line %d is %d times in the merged log:\n%s", id, i, n, log)
			}
		}
	}
}

// Each replica writes conf.txt with its own modification time; after the
// scale-down the volume holds the newest copy.
func TestAppStateNewest(t *testing.T) {
	d := startDaemon(t)
	d.busybox("busybox:1")
	const app = "confs"
	// Distinct times from the replicas' ids (app-<8 hex digits>).
	d.deploy(stateApp(app, `echo $SHOAL_REPLICA > /state/conf.txt; touch -d "@$((0x${SHOAL_REPLICA##*-} % 1000000000 + 1000000000))" /state/conf.txt`,
		`merge = "newest"`))
	a := d.waitApp(app, "three ready replicas", func(a types.App) bool { return a.Ready == 3 })
	ids := replicaIDs(a)
	var newest string
	var newestAt time.Time
	for _, id := range ids {
		fi, err := os.Stat(filepath.Join(d.dataDir, "apps", app, "state", "live", id, "data", "conf.txt"))
		if err != nil {
			t.Fatal(err)
		}
		if fi.ModTime().After(newestAt) {
			newest, newestAt = id, fi.ModTime()
		}
	}
	d.scaleDownAndMerge(app, ids)
	if got := d.volumeFile(app, "conf.txt"); got != newest+"\n" {
		t.Fatalf("conf.txt is %q, want the newest copy, %s's", got, newest)
	}
	fi, err := os.Stat(filepath.Join(d.dataDir, "apps", app, "volumes", "data", "conf.txt"))
	if err != nil || !fi.ModTime().Equal(newestAt) {
		t.Fatalf("conf.txt's time %v, want %v (%v)", fi.ModTime(), newestAt, err)
	}
}

// The hook runs the image's own command in a container that sees the
// replica's state and the volume, and is removed after.
func TestAppStateHook(t *testing.T) {
	d := startDaemon(t)
	d.busybox("busybox:1")
	const app = "hooked"
	d.deploy(stateApp(app, `echo "$SHOAL_REPLICA was here" > /state/part`,
		`merge = "hook"
hook = ["sh", "-c", "cat /state/* >> /data/merged && echo $SHOAL_REPLICA >> /data/hooks"]`))
	a := d.waitApp(app, "three ready replicas", func(a types.App) bool { return a.Ready == 3 })
	ids := replicaIDs(a)
	d.scaleDownAndMerge(app, ids)
	merged, hooks := d.volumeFile(app, "merged"), d.volumeFile(app, "hooks")
	for _, id := range ids {
		if strings.Count(merged, id+" was here\n") != 1 || strings.Count(hooks, id+"\n") != 1 {
			t.Fatalf("after the hooks of %v:\nmerged:\n%s\nhooks:\n%s", ids, merged, hooks)
		}
	}
	out, err := exec.Command("runc", "--root", filepath.Join(d.runDir, "runc"), "list", "-q").CombinedOutput()
	if err != nil {
		t.Fatalf("runc list: %v: %s", err, out)
	}
	if strings.Contains(string(out), "-merge-") {
		t.Fatalf("hook containers left: %s", out)
	}
}

// A hook that fails keeps the replica's state, and the event says why:
// its exit code and the end of its output.
func TestAppStateHookFails(t *testing.T) {
	d := startDaemon(t)
	d.busybox("busybox:1")
	const app = "badhook"
	m := stateApp(app, `echo x > /state/part`, `merge = "hook"
hook = ["sh", "-c", "echo no room >&2; exit 7"]`)
	d.deploy(strings.Replace(m, "min = 3", "min = 1", 1))
	a := d.waitApp(app, "a ready replica", func(a types.App) bool { return a.Ready == 1 })
	id := a.Replicas[0].ID
	d.must("app", "scale", app, "--min", "0")
	var failed types.Event
	waitFor(t, "the hook fails", func() bool {
		for _, e := range d.events(app, "merge-failed") {
			if e.Replica == id {
				failed = e
				return true
			}
		}
		return false
	})
	if !strings.Contains(failed.Reason, "exited with code 7") || !strings.Contains(failed.Reason, "no room") {
		t.Fatalf("event %+v", failed)
	}
	if _, err := os.Stat(filepath.Join(d.dataDir, "apps", app, "state", "gone", id, "data", "part")); err != nil {
		t.Fatalf("the state of a failed merge is not kept: %v", err)
	}
}

// The daemon is killed with SIGKILL in the middle of a merge (its journal
// is on disk); the next daemon finishes it, and every replica's lines are
// in the volume exactly once.
func TestAppStateAppendDaemonKilledMidMerge(t *testing.T) {
	d := startDaemon(t)
	d.busybox("busybox:1")
	const app = "crashy"
	const files = 300
	d.deploy(stateApp(app, fmt.Sprintf(`mkdir -p /state/d; i=0; while [ $i -lt %d ]; do echo "$SHOAL_REPLICA $i" >> /state/d/f$i.log; i=$((i+1)); done`, files),
		`merge = "append"`))
	a := d.waitApp(app, "three ready replicas", func(a types.App) bool { return a.Ready == 3 })
	ids := replicaIDs(a)
	d.must("app", "scale", app, "--min", "0")
	journals := filepath.Join(d.dataDir, "apps", app, "state", "gone", "*", "work", "append.json")
	waitFor(t, "a merge under way", func() bool {
		m, _ := filepath.Glob(journals)
		return len(m) > 0
	})
	d.stop(syscall.SIGKILL)
	left, _ := filepath.Glob(journals)
	t.Logf("killed with %d merges under way", len(left))
	d.start()
	d.waitApp(app, "every replica stops", func(a types.App) bool { return len(a.Replicas) == 0 })
	state := filepath.Join(d.dataDir, "apps", app, "state")
	waitFor(t, "every state area merged", func() bool {
		a, _ := os.ReadDir(filepath.Join(state, "live"))
		b, _ := os.ReadDir(filepath.Join(state, "gone"))
		return len(a)+len(b) == 0
	})
	if failed := d.events(app, "merge-failed"); len(failed) > 0 {
		t.Fatalf("merge failed: %+v", failed)
	}
	for i := 0; i < files; i++ {
		got := d.volumeFile(app, fmt.Sprintf("d/f%d.log", i))
		for _, id := range ids {
			if n := strings.Count(got, fmt.Sprintf("%s %d\n", id, i)); n != 1 {
				t.Fatalf("d/f%d.log has %s's line %d times:\n%s", i, id, n, got)
			}
		}
		if strings.Count(got, "\n") != len(ids) {
			t.Fatalf("d/f%d.log:\n%s", i, got)
		}
	}
}
