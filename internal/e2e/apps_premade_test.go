package e2e

import (
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"

	"github.com/shoal-run/shoal/internal/api/types"
)

const premadeManifest = `
name = "%s"
image = "hello:1"
port = 8080
[scale]
min = 0
max = 2
idle_timeout = "%s"
freeze_timeout = "%s"
[resources]
memory = "96Mi"
[env]
GREETING = "%s"
[health]
http = "/healthz"
`

// premade is the app's premade replica: a container of the app that its
// status does not list.
func (d *daemon) premade(app string) (string, bool) {
	d.t.Helper()
	a := d.app(app)
	var found []string
	for _, id := range d.runcIDs() {
		if !strings.HasPrefix(id, app+"-") {
			continue
		}
		listed := false
		for _, r := range a.Replicas {
			listed = listed || r.ID == id
		}
		if !listed {
			found = append(found, id)
		}
	}
	if len(found) > 1 {
		d.t.Fatalf("app %s has %d premade replicas: %v", app, len(found), found)
	}
	if len(found) == 0 {
		return "", false
	}
	return found[0], true
}

// waitPremade waits for the app's premade replica, other than not, and
// its pid 1 waiting: shoal-init.
func (d *daemon) waitPremade(app, not string) string {
	d.t.Helper()
	var id string
	waitFor(d.t, "a premade replica of "+app, func() bool {
		var ok bool
		id, ok = d.premade(app)
		if !ok || id == not {
			return false
		}
		// Its pid 1 waits once it is shoal-init (runc's init before), and
		// a start takes it once its app's status names it.
		b, _ := os.ReadFile(fmt.Sprintf("/proc/%d/cmdline", d.runcPid(id)))
		return string(b) == "/dev/shoal-init\x00" && d.app(app).Premade == id
	})
	return id
}

// runcPid is the pid of a running container (0: none).
func (d *daemon) runcPid(id string) int {
	d.t.Helper()
	b, err := os.ReadFile(filepath.Join(d.runDir, "runc", id, "state.json"))
	if err != nil {
		return 0
	}
	const key = `"init_process_pid":`
	i := strings.Index(string(b), key)
	if i < 0 {
		return 0
	}
	s := string(b[i+len(key):])
	n, _ := strconv.Atoi(s[:strings.IndexAny(s, ",}")])
	return n
}

func procFile(t *testing.T, pid int, name string) string {
	t.Helper()
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/%s", pid, name))
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

// TestPremadeReplicaServesFirstRequest: an app at zero replicas has its
// next replica made ahead, its pid 1 shoal-init waiting; the first request
// through the proxy makes it the app's replica (the same container and
// process, now the app's entrypoint), which answers, with the app's
// environment, user and memory limit.
func TestPremadeReplicaServesFirstRequest(t *testing.T) {
	d := startDaemon(t)
	d.exampleImage("hello")
	d.deploy(fmt.Sprintf(premadeManifest, "pre", "1m", "10m", "ahoy"))
	if a := d.app("pre"); len(a.Replicas) != 0 {
		t.Fatalf("a fresh app with min 0 lists replicas: %+v", a.Replicas)
	}
	id := d.waitPremade("pre", "")
	pid := d.runcPid(id)
	code, body, rep := get(t, d.proxyAddr(), "pre", "/")
	if code != 200 || !strings.HasPrefix(body, "ahoy from ") || rep != id {
		t.Fatalf("first request: %d %q from %q, want the premade %s", code, body, rep, id)
	}
	a := d.app("pre")
	if len(a.Replicas) != 1 || a.Replicas[0].ID != id || a.Replicas[0].State != "ready" || a.Replicas[0].Pid != pid {
		t.Fatalf("after the first request: %+v; the premade was %s pid %d", a.Replicas, id, pid)
	}
	// Its entrypoint, under shoal-init's init (init = true by default).
	if cmd := procFile(t, pid, "cmdline"); cmd != "/dev/shoal-init\x00init\x00/hello\x00" {
		t.Fatalf("the replica runs %q", cmd)
	}
	env := procFile(t, pid, "environ")
	for _, want := range []string{"GREETING=ahoy", "PORT=8080", "SHOAL_APP=pre", "SHOAL_REPLICA=" + id, "SHOAL_REVISION=1"} {
		if !strings.Contains("\x00"+env, "\x00"+want+"\x00") {
			t.Errorf("its environment lacks %s: %q", want, env)
		}
	}
	// The image's user, root, as the app's user namespace maps it.
	root := uint64(0)
	if f := strings.Fields(procFile(t, pid, "uid_map")); len(f) == 3 && f[0] == "0" {
		root, _ = strconv.ParseUint(f[1], 10, 64)
	}
	if uid, gid := statusIDs(t, pid); uid != root || gid != root {
		t.Errorf("it runs as %d:%d, want the app's root %d", uid, gid, root)
	}
	if got := memoryLimit(t, pid); got != 96<<20 {
		t.Errorf("its memory limit is %d, want 96Mi", got)
	}
}

// memoryLimit is the memory limit of process pid's cgroup (v1 or v2).
func memoryLimit(t *testing.T, pid int) int64 {
	t.Helper()
	for _, l := range strings.Split(procFile(t, pid, "cgroup"), "\n") {
		f := strings.SplitN(l, ":", 3)
		if len(f) != 3 {
			continue
		}
		var p string
		switch {
		case f[1] == "memory":
			p = filepath.Join("/sys/fs/cgroup/memory", f[2], "memory.limit_in_bytes")
		case f[0] == "0" && f[1] == "":
			p = filepath.Join("/sys/fs/cgroup/unified", f[2], "memory.max")
			if _, err := os.Stat(p); err != nil {
				p = filepath.Join("/sys/fs/cgroup", f[2], "memory.max")
			}
		default:
			continue
		}
		b, err := os.ReadFile(p)
		if err != nil {
			continue
		}
		n, err := strconv.ParseInt(strings.TrimSpace(string(b)), 10, 64)
		if err == nil {
			return n
		}
	}
	t.Fatalf("no memory limit found for pid %d", pid)
	return 0
}

// TestPremadeDroppedOnNewRevision: a deploy that makes a new revision
// drops the premade replica of the old one (never used for another
// revision) and makes one of the new, which serves with the new config.
func TestPremadeDroppedOnNewRevision(t *testing.T) {
	d := startDaemon(t)
	d.exampleImage("hello")
	d.deploy(fmt.Sprintf(premadeManifest, "rev", "1m", "10m", "one"))
	old := d.waitPremade("rev", "")
	d.deploy(fmt.Sprintf(premadeManifest, "rev", "1m", "10m", "two"))
	if a := d.app("rev"); a.Revision != 2 {
		t.Fatalf("revision %d after a changed deploy", a.Revision)
	}
	id := d.waitPremade("rev", old)
	waitFor(t, "the old revision's premade replica gone", func() bool {
		for _, c := range d.runcIDs() {
			if c == old {
				return false
			}
		}
		return true
	})
	code, body, rep := get(t, d.proxyAddr(), "rev", "/")
	if code != 200 || !strings.HasPrefix(body, "two from ") || rep != id {
		t.Fatalf("first request: %d %q from %q, want revision 2's premade %s", code, body, rep, id)
	}
}

// TestPremadeBudgetEvictsLeastRecentlyUsed: with a budget of one, the app
// used last keeps the premade replica; the other's is removed.
func TestPremadeBudgetEvictsLeastRecentlyUsed(t *testing.T) {
	d := startDaemon(t, "--premade", "1")
	d.exampleImage("hello")
	d.deploy(fmt.Sprintf(premadeManifest, "lra", "1m", "10m", "a"))
	d.deploy(fmt.Sprintf(premadeManifest, "lrb", "1s", "1s", "b"))
	// Neither requested yet: the one deployed last keeps it.
	d.waitPremade("lrb", "")
	if id, ok := d.premade("lra"); ok {
		t.Fatalf("lra has a premade replica %s beside lrb's, over the budget of 1", id)
	}
	if code, _, _ := get(t, d.proxyAddr(), "lrb", "/"); code != 200 {
		t.Fatalf("lrb answered %d", code)
	}
	// lrb, idle 1s, frozen 1s, then at zero, was used last: it takes the
	// premade replica, lra's goes.
	d.waitApp("lrb", "back at zero", func(a types.App) bool { return replicasIn(a, "ready")+replicasIn(a, "frozen") == 0 })
	d.waitPremade("lrb", "")
	waitFor(t, "lra's premade replica gone", func() bool { _, ok := d.premade("lra"); return !ok })
}

// TestPremadeLeavesNothing: premade replicas are removed with their app,
// by a daemon that stops, and, after a daemon killed, by the next one:
// no container, mount, cgroup or network namespace is left of them.
func TestPremadeLeavesNothing(t *testing.T) {
	d := startDaemon(t)
	d.exampleImage("hello")
	d.deploy(fmt.Sprintf(premadeManifest, "gone", "1m", "10m", "x"))
	first := d.waitPremade("gone", "")
	d.stop(syscall.SIGKILL)
	d.start()
	second := d.waitPremade("gone", first)
	waitFor(t, "the killed daemon's premade replica removed", func() bool { return !d.leftOf(first) })
	d.stop(syscall.SIGTERM)
	if d.leftOf(second) {
		t.Fatalf("a daemon that stopped left its premade replica %s", second)
	}
	d.start()
	third := d.waitPremade("gone", second)
	d.must("app", "rm", "gone")
	for _, id := range []string{first, second, third} {
		if d.leftOf(id) {
			t.Fatalf("premade replica %s left after its app was removed", id)
		}
	}
}

// leftOf reports whether anything of container id is left: a container,
// a mount, a cgroup or a network namespace naming it.
func (d *daemon) leftOf(id string) bool {
	d.t.Helper()
	for _, c := range d.runcIDs() {
		if c == id {
			return true
		}
	}
	if b, err := os.ReadFile("/proc/self/mountinfo"); err != nil || strings.Contains(string(b), id) {
		return true
	}
	roots, _ := filepath.Glob("/sys/fs/cgroup/*")
	for _, r := range append(roots, "/sys/fs/cgroup") {
		if _, err := os.Stat(filepath.Join(r, d.cgroup, id)); err == nil {
			return true
		}
	}
	if ns, _ := filepath.Glob(filepath.Join(d.runDir, "netns", "*")); len(ns) > 0 {
		for _, n := range ns {
			if strings.Contains(n, id) {
				return true
			}
		}
	}
	return false
}
