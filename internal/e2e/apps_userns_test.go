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
	"github.com/shoal-run/shoal/internal/mountinfo"
	"github.com/shoal-run/shoal/internal/userns"
)

// usernsApp serves, on :80, the uid map and the sizes of masked /proc
// files it sees, from a volume it chowns to www-data. Its health command
// fails in a replica that runs as the host's root: the check runs
// confined like the replica.
const usernsApp = `
name = "uns"
image = "busybox:1"
port = 80
command = ["sh", "-c", "cat /proc/self/uid_map > /www/uidmap; for f in slabinfo vmallocinfo iomem kallsyms; do wc -c < /proc/$f >> /www/masked; done; echo $REV > /www/rev.$REV; chown -R 33:33 /www; exec httpd -f -p 80 -h /www"]
[env]
REV = "%d"
[scale]
min = 1
max = 1
[health]
command = ["/bin/sh", "-c", "! grep -q 4294967295 /proc/self/uid_map"]
interval = "100ms"
[volumes]
www = "/www"
`

// appCaps is the CapEff of a replica's root: CHOWN, DAC_OVERRIDE, FOWNER,
// FSETID, KILL, SETGID, SETUID, NET_BIND_SERVICE.
const appCaps = "00000000000004fb"

// uidMap is the uid map of process pid: its first host id and size.
func uidMap(t *testing.T, pid int) (host, size uint64) {
	t.Helper()
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/uid_map", pid))
	if err != nil {
		t.Fatal(err)
	}
	f := strings.Fields(string(b))
	if len(f) != 3 || f[0] != "0" {
		t.Fatalf("process %d: uid map %q", pid, b)
	}
	host, _ = strconv.ParseUint(f[1], 10, 64)
	size, _ = strconv.ParseUint(f[2], 10, 64)
	return host, size
}

// capEff is the effective capability set of process pid.
func capEff(t *testing.T, pid int) string {
	t.Helper()
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		t.Fatal(err)
	}
	for _, l := range strings.Split(string(b), "\n") {
		if v, ok := strings.CutPrefix(l, "CapEff:"); ok {
			return strings.TrimSpace(v)
		}
	}
	t.Fatalf("process %d: no CapEff", pid)
	return ""
}

// TestAppUserNamespace: a replica runs as root in a user namespace of its
// app's own (not the host's 0 0 4294967295), binds :80, keeps a small
// capability set, cannot read the kernel's layout files, owns its
// volume, passes a command check that fails as the host's root, and
// keeps its app's host ids across a daemon restart; `shoal info` says
// what apps run as.
func TestAppUserNamespace(t *testing.T) {
	d := startDaemon(t)
	d.busybox("busybox:1")
	d.deploy(fmt.Sprintf(usernsApp, 1))
	a := d.waitApp("uns", "a ready replica", func(a types.App) bool { return a.Ready == 1 })
	pid := a.Replicas[0].Pid
	host, size := uidMap(t, pid)
	if host < 1<<31 || size != 65536 {
		t.Fatalf("replica's uid map: host %d size %d, want 65536 ids from 2^31 up", host, size)
	}
	if c := capEff(t, pid); c != appCaps {
		t.Fatalf("replica's capabilities %s, want %s", c, appCaps)
	}
	proxy := d.proxyAddr()
	if code, body, _ := get(t, proxy, "uns", "/uidmap"); code != 200 || strings.Contains(body, "4294967295") || !strings.Contains(body, strconv.FormatUint(host, 10)) {
		t.Fatalf("uid map seen inside: %d %q", code, body)
	}
	if code, body, _ := get(t, proxy, "uns", "/masked"); code != 200 || strings.Fields(body) == nil || strings.Trim(strings.Join(strings.Fields(body), ""), "0") != "" {
		t.Fatalf("bytes of slabinfo, vmallocinfo, iomem, kallsyms read inside: %d %q", code, body)
	}
	var st syscall.Stat_t
	if err := syscall.Stat(filepath.Join(d.dataDir, "apps", "uns", "volumes", "www", "uidmap"), &st); err != nil || uint64(st.Uid) != host+33 {
		t.Fatalf("volume file owner %d (%v), want www-data of the range, %d", st.Uid, err, host+33)
	}
	info := d.must("info")
	if !strings.Contains(info, "user namespace of their own") || !strings.Contains(info, "idmapped") {
		t.Fatalf("info does not say what apps run as:\n%s", info)
	}

	d.stop(syscall.SIGTERM)
	d.start()
	d.deploy(fmt.Sprintf(usernsApp, 2))
	var fresh types.Replica
	d.waitApp("uns", "a ready replica of revision 2", func(a types.App) bool {
		for _, r := range a.Replicas {
			if r.Revision == 2 && r.State == "ready" {
				fresh = r
				return true
			}
		}
		return false
	})
	if h, _ := uidMap(t, fresh.Pid); h != host {
		t.Fatalf("after a restart the app runs as host id %d, before as %d", h, host)
	}
	if code, body, _ := get(t, d.proxyAddr(), "uns", "/rev.2"); code != 200 || strings.TrimSpace(body) != "2" {
		t.Fatalf("revision 2 over its volume: %d %q", code, body)
	}
}

// TestAppUserNamespaceCopied: where idmapped layers are not to be used,
// a replica runs in its user namespace on shifted copies of the layers,
// no idmapped mount is made, and `shoal info` says so.
func TestAppUserNamespaceCopied(t *testing.T) {
	t.Setenv("SHOAL_USERNS_IDMAP", "0")
	d := startDaemon(t)
	d.busybox("busybox:1")
	d.deploy(fmt.Sprintf(usernsApp, 1))
	a := d.waitApp("uns", "a ready replica", func(a types.App) bool { return a.Ready == 1 })
	host, _ := uidMap(t, a.Replicas[0].Pid)
	if host < 1<<31 {
		t.Fatalf("replica runs as host id %d", host)
	}
	if code, body, _ := get(t, d.proxyAddr(), "uns", "/uidmap"); code != 200 || !strings.Contains(body, strconv.FormatUint(host, 10)) {
		t.Fatalf("uid map seen inside: %d %q", code, body)
	}
	if info := d.must("info"); !strings.Contains(info, "copied and shifted") || !strings.Contains(info, "SHOAL_USERNS_IDMAP=0") {
		t.Fatalf("info does not say layers are copied:\n%s", info)
	}
	if mps, _ := mountinfo.MountsUnder(usernsMountDir(d)); len(mps) != 0 {
		t.Fatalf("idmapped mounts made though layers are copied: %v", mps)
	}
	copies, _ := filepath.Glob(filepath.Join(d.dataDir, "userns", strconv.FormatUint(host, 10), "*"))
	if len(copies) == 0 {
		t.Fatal("no shifted copy of the layer")
	}
	var st syscall.Stat_t
	if err := syscall.Stat(filepath.Join(copies[0], "bin", "busybox"), &st); err != nil || uint64(st.Uid) != host {
		t.Fatalf("copied busybox owner %d (%v), want %d", st.Uid, err, host)
	}
}

// usernsMountDir is where daemon d keeps its idmapped layers.
func usernsMountDir(d *daemon) string { return userns.LayersDir(d.dataDir) }

// unmountLayers removes the idmapped layers a daemon killed with SIGKILL
// left (a daemon that stops unmounts them).
func (d *daemon) unmountLayers() { userns.RemoveLayers(usernsMountDir(d)) }
