package e2e

import (
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"syscall"
	"testing"

	"github.com/shoal-run/shoal/internal/api/types"
)

// statefulManifest is a stateful app of busybox: each replica appends its
// name, id and peers to its own volume's boots.txt and serves the volume;
// ready once /data/name is there (ready_command).
func statefulManifest(name, greeting string, replicas int) string {
	return fmt.Sprintf(`
name = %q
image = "busybox:1"
command = ["sh", "-c", "echo \"$SHOAL_NAME $SHOAL_REPLICA $SHOAL_ORDINAL/$SHOAL_REPLICAS peers=$SHOAL_PEERS hosts=$SHOAL_PEER_HOSTS $(hostname)\" >> /data/boots.txt; echo $SHOAL_NAME > /data/name; httpd -f -p 8080 -h /data & trap 'kill $!; exit' TERM; wait"]
[env]
GREETING = %q
[volumes]
data = "/data"
[stateful]
replicas = %d
ready_command = ["test", "-s", "/data/name"]
[health]
http = "/name"
`, name, greeting, replicas)
}

// byOrdinal maps each ordinal of a to its replica.
func byOrdinal(t *testing.T, a types.App) map[int]types.Replica {
	t.Helper()
	out := map[int]types.Replica{}
	for _, r := range a.Replicas {
		if r.Ordinal == nil {
			t.Fatalf("replica %s of stateful app %s has no ordinal", r.ID, a.Name)
		}
		if !strings.HasPrefix(r.ID, a.Name+"-"+strconv.Itoa(*r.Ordinal)+"-") {
			t.Fatalf("replica %s is ordinal %d: its id does not carry its name", r.ID, *r.Ordinal)
		}
		out[*r.Ordinal] = r
	}
	return out
}

// allReady reports whether a runs exactly n replicas, ordinals 0..n-1,
// all ready, of revision rev (0: any).
func allReady(a types.App, n, rev int) bool {
	if len(a.Replicas) != n {
		return false
	}
	seen := map[int]bool{}
	for _, r := range a.Replicas {
		if r.State != "ready" || r.Ordinal == nil || *r.Ordinal >= n || (rev > 0 && r.Revision != rev) {
			return false
		}
		seen[*r.Ordinal] = true
	}
	return len(seen) == n
}

// readVolume reads path of an app's volume through `shoal volume cp`.
func (d *daemon) readVolume(app, vol, path string) string {
	d.t.Helper()
	out := filepath.Join(d.t.TempDir(), "out")
	d.must("volume", "cp", app+":"+vol+":"+path, out)
	b, err := os.ReadFile(out)
	if err != nil {
		d.t.Fatal(err)
	}
	return string(b)
}

// A stateful app with real containers: its ordinals start in order, each
// once the one before is ready, with the peers' addresses and its stable
// name; a killed ordinal comes back in place on its own volume; a
// scale-down removes the highest ordinal and keeps its volume until
// `shoal app volumes prune`; a new revision rolls out one ordinal at a
// time, highest first.
func TestStatefulApp(t *testing.T) {
	d := startDaemon(t)
	d.busybox("busybox:1")
	d.deploy(statefulManifest("sdb", "one", 3))
	a := d.waitApp("sdb", "3 ordinals ready", func(a types.App) bool { return allReady(a, 3, 0) })
	ords := byOrdinal(t, a)

	// Ordered start: each ordinal started once the one before was ready.
	evs := parseEvents(t, d.must("events", "--app", "sdb", "--output", "json"))
	seq := func(kind, replica string) int64 {
		for _, e := range evs {
			if e.Kind == kind && e.Replica == replica {
				return e.Seq
			}
		}
		t.Fatalf("no %s event of %s in %+v", kind, replica, evs)
		return 0
	}
	for o := 1; o < 3; o++ {
		if prev, next := seq("ready", ords[o-1].ID), seq("start", ords[o].ID); next < prev {
			t.Errorf("ordinal %d started (event %d) before ordinal %d was ready (event %d)", o, next, o-1, prev)
		}
	}

	// Stable names and the peers each one was given: the ordinals before
	// it, with their addresses.
	host := func(r types.Replica) string { return strings.Split(r.Addr, ":")[0] }
	for o := 0; o < 3; o++ {
		var peers, hosts []string
		for p := 0; p < o; p++ {
			peers, hosts = append(peers, ords[p].Addr), append(hosts, host(ords[p]))
		}
		want := fmt.Sprintf("sdb-%d %s %d/3 peers=%s hosts=%s sdb-%d\n", o, ords[o].ID, o, strings.Join(peers, ","), strings.Join(hosts, ","), o)
		if got := d.readVolume("sdb", fmt.Sprintf("data-%d", o), "/boots.txt"); got != want {
			t.Errorf("ordinal %d's boots.txt: %q, want %q", o, got, want)
		}
	}
	if ls := d.must("volume", "ls"); !regexp.MustCompile(`sdb\s+data-2\s+/data\s+in use`).MatchString(ls) {
		t.Errorf("volume ls: no data-2 in use:\n%s", ls)
	}

	// A killed ordinal is replaced in place: the same name, its volume.
	if err := syscall.Kill(ords[1].Pid, syscall.SIGKILL); err != nil {
		t.Fatalf("kill ordinal 1 (pid %d): %v", ords[1].Pid, err)
	}
	a = d.waitApp("sdb", "ordinal 1 replaced", func(a types.App) bool {
		return allReady(a, 3, 0) && byOrdinal(t, a)[1].ID != ords[1].ID
	})
	again := byOrdinal(t, a)[1]
	boots := strings.Split(strings.TrimSpace(d.readVolume("sdb", "data-1", "/boots.txt")), "\n")
	if len(boots) != 2 || !strings.HasPrefix(boots[0], "sdb-1 "+ords[1].ID+" ") || !strings.HasPrefix(boots[1], "sdb-1 "+again.ID+" 1/3 peers="+ords[0].Addr+","+ords[2].Addr+" ") {
		t.Errorf("ordinal 1's volume after its replacement: %q", boots)
	}

	// Scale down: ordinal 2 goes, its volume stays until pruned.
	d.must("app", "scale", "sdb", "--max", "2")
	a = d.waitApp("sdb", "scaled down to 2", func(a types.App) bool { return allReady(a, 2, 0) })
	// Kept once the store forgets the replica (its record is deleted by
	// the writer, after its removal).
	waitFor(t, "data-2 kept after the scale-down", func() bool {
		return regexp.MustCompile(`sdb\s+data-2\s+-\s+kept`).MatchString(d.must("volume", "ls"))
	})
	if out := d.must("app", "volumes", "prune", "sdb"); strings.TrimSpace(out) != "removed sdb:data-2" {
		t.Errorf("prune: %q", out)
	}
	if ls := d.must("volume", "ls"); strings.Contains(ls, "data-2") || !strings.Contains(ls, "data-1") {
		t.Errorf("volume ls after the prune:\n%s", ls)
	}
	if r := d.shoal("app", "scale", "sdb", "--min", "0"); r.code == 0 || !strings.Contains(r.stderr, "allow_zero") {
		t.Errorf("scale to zero of a stateful app without allow_zero: exit %d, %s", r.code, r.stderr)
	}

	// A new revision rolls out one ordinal at a time, highest first.
	before := byOrdinal(t, a)
	d.deploy(statefulManifest("sdb", "two", 2))
	a = d.waitApp("sdb", "revision 2 on both ordinals", func(a types.App) bool { return allReady(a, 2, 2) })
	after := byOrdinal(t, a)
	evs = parseEvents(t, d.must("events", "--app", "sdb", "--output", "json"))
	drain1, drain0 := seq("drain", before[1].ID), seq("drain", before[0].ID)
	ready1 := seq("ready", after[1].ID)
	if !(drain1 < ready1 && ready1 < drain0) {
		t.Errorf("rolling upgrade out of order: ordinal 1 drained at %d, its successor ready at %d, ordinal 0 drained at %d", drain1, ready1, drain0)
	}
	if a.Rollout == nil || a.Rollout.State != "done" {
		t.Errorf("rollout: %+v", a.Rollout)
	}
}
