package e2e

import (
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"

	"github.com/shoal-run/shoal/internal/image/imagetest"
	"github.com/shoal-run/shoal/internal/store/storetest"
)

// TestEtcdStore runs the daemon on a real etcd: containers run, and their
// records survive a daemon restart in etcd, not in a local file.
func TestEtcdStore(t *testing.T) {
	ep := storetest.StartEtcd(t)
	d := startDaemon(t, "--store", "etcd://"+strings.TrimPrefix(ep, "http://"))
	d.busybox("busybox:1")
	if out := d.must("run", "--rm", "busybox:1", "echo", "on etcd"); out != "on etcd\n" {
		t.Fatalf("run printed %q", out)
	}
	d.must("run", "busybox:1", "true")
	before := d.ps()
	if len(before) != 1 {
		t.Fatalf("ps -a = %+v, want one stopped container", before)
	}
	d.stop(syscall.SIGKILL)
	d.start()
	after := d.ps()
	if len(after) != 1 || after[0].ID != before[0].ID {
		t.Fatalf("after restart on etcd ps -a = %+v, want %+v", after, before)
	}
	if info := d.must("info"); !strings.Contains(info, "etcd://") {
		t.Fatalf("info does not name the etcd store:\n%s", info)
	}
	d.must("rm", after[0].ID)
}

// TestPullFromRegistry pushes an image the daemon built to a registry on
// loopback with skopeo, removes it, and pulls it back through the CLI.
func TestPullFromRegistry(t *testing.T) {
	reg := imagetest.StartRegistry(t)
	d := startDaemon(t)
	d.busybox("busybox:1")
	layout := filepath.Join(d.dataDir, "images")
	out, err := exec.Command("skopeo", "copy", "--dest-tls-verify=false",
		"oci:"+layout+":busybox:1", "docker://"+reg+"/team/busybox:2").CombinedOutput()
	if err != nil {
		t.Fatalf("skopeo copy to the registry: %v\n%s", err, out)
	}
	d.must("image", "rm", "busybox:1")
	d.must("image", "pull", "--insecure", reg+"/team/busybox:2")
	if out := d.must("run", "--rm", reg+"/team/busybox:2", "echo", "pulled"); out != "pulled\n" {
		t.Fatalf("run of the pulled image printed %q", out)
	}
	r := d.shoal("image", "pull", "--insecure", reg+"/team/nosuch:1")
	if r.code == 0 || !strings.Contains(r.stderr, "nosuch") {
		t.Fatalf("pull of a missing image: code %d stderr %q", r.code, r.stderr)
	}
	if out := d.must("image", "ls"); strings.Contains(out, "nosuch") {
		t.Fatalf("a failed pull left an image:\n%s", out)
	}
}
