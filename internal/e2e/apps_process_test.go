package e2e

import (
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	"github.com/shoal-run/shoal/internal/api/types"
	"github.com/shoal-run/shoal/internal/image/imagetest"
)

// command replaces the image's ENTRYPOINT, as in Kubernetes: an image
// whose entrypoint is `/bin/sh -c` runs the manifest's own `sh -c ...`
// as is (appended to the entrypoint it would run `sh` with no script and
// crash), and the deploy warns that the entrypoint is replaced. args
// replaces the image's CMD and follows the entrypoint.
func TestAppCommandReplacesEntrypoint(t *testing.T) {
	d := startDaemon(t)
	dir := filepath.Join(t.TempDir(), "rootfs")
	if err := imagetest.BusyboxDir(dir); err != nil {
		t.Fatalf("busybox-static is needed: %v", err)
	}
	d.must("image", "build", dir, "--tag", "shep:1", "--entrypoint", "/bin/sh", "--entrypoint", "-c", "--cmd", "exit 7")
	d.deploy(`
name = "cmd"
image = "shep:1"
command = ["sh", "-c", "exec httpd -f -p 8080"]
[scale]
min = 1
max = 1
`)
	d.waitApp("cmd", "ready", func(a types.App) bool { return a.Ready == 1 })
	if evs := d.must("events", "--app", "cmd"); !strings.Contains(evs, "replaces the image's entrypoint") {
		t.Errorf("no warning event for an interpreter command over an entrypoint:\n%s", evs)
	}
	d.deploy(`
name = "args"
image = "shep:1"
args = ["exec httpd -f -p 8080"]
[scale]
min = 1
max = 1
`)
	d.waitApp("args", "ready", func(a types.App) bool { return a.Ready == 1 })
	if evs := d.must("events", "--app", "args"); strings.Contains(evs, "replaces the image's entrypoint") {
		t.Errorf("a warning event for args:\n%s", evs)
	}
}

// stop_signal names the signal a replica is stopped with: an app that
// ignores SIGTERM and exits on SIGQUIT stops at once when the app is
// removed, long before its stop_timeout (5m) would end it with SIGKILL.
// shoal-init (init = true) passes the signal on to the app.
func TestAppStopSignal(t *testing.T) {
	d := startDaemon(t)
	d.busybox("busybox:1")
	d.deploy(`
name = "quitter"
image = "busybox:1"
command = ["sh", "-c", "httpd -f -p 8080 & trap '' TERM; trap 'kill $!; exit 0' QUIT; wait"]
stop_signal = "SIGQUIT"
stop_timeout = "5m"
[scale]
min = 1
max = 1
`)
	a := d.waitApp("quitter", "ready", func(a types.App) bool { return a.Ready == 1 })
	pid := a.Replicas[0].Pid
	if init := procState(pid); !strings.Contains(init, "shoal-init") {
		t.Fatalf("replica's pid 1 is %q, want shoal-init", init)
	}
	removed := make(chan result, 1)
	go func() { removed <- d.shoal("app", "rm", "quitter") }()
	waitFor(t, "the replica stopped by SIGQUIT", func() bool {
		_, err := os.Stat(filepath.Join("/proc", strconv.Itoa(pid)))
		return os.IsNotExist(err) || strings.HasSuffix(procState(pid), "Z")
	})
	if r := <-removed; r.code != 0 {
		t.Fatalf("app rm: exit %d: %s", r.code, r.stderr)
	}
}
