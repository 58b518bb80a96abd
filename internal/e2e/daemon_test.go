package e2e

import (
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/shoal-run/shoal/internal/image/imagetest"
)

type psRow struct {
	ID     string `json:"id"`
	Status string `json:"status"`
	Pid    int    `json:"pid"`
}

func (d *daemon) ps() []psRow {
	d.t.Helper()
	var rows []psRow
	if err := json.Unmarshal([]byte(d.must("ps", "-a", "-o", "json")), &rows); err != nil {
		d.t.Fatal(err)
	}
	return rows
}

// TestDaemonRestartAdopts stops the daemon (SIGKILL, then SIGTERM) while an
// attached container runs, starts a new one, and checks the container was
// adopted (same PID, still running) and is fully removed by rm.
func TestDaemonRestartAdopts(t *testing.T) {
	for _, sig := range []syscall.Signal{syscall.SIGKILL, syscall.SIGTERM} {
		t.Run(sig.String(), func(t *testing.T) { testRestartAdopts(t, sig) })
	}
}

func testRestartAdopts(t *testing.T, sig syscall.Signal) {
	d := startDaemon(t)
	d.busybox("busybox:1")

	before := d.runAttached("busybox:1", "sleep", "600")

	d.stop(sig)
	if err := syscall.Kill(before.Pid, 0); err != nil {
		t.Fatalf("container pid %d died with the daemon: %v", before.Pid, err)
	}
	d.start()
	rows := d.ps()
	if len(rows) != 1 || rows[0].ID != before.ID || rows[0].Pid != before.Pid || rows[0].Status != "running" {
		t.Fatalf("after restart ps = %+v, want %+v adopted", rows, before)
	}
	d.must("rm", before.ID)
	if !gone(before.Pid) {
		t.Fatalf("pid %d still alive after rm", before.Pid)
	}
	mounts, _ := os.ReadFile("/proc/self/mountinfo")
	if strings.Contains(string(mounts), filepath.Join(d.dataDir, "containers", before.ID)) {
		t.Fatalf("a mount of container %s is left after rm", before.ID)
	}
}

func TestTCPAPIRequiresToken(t *testing.T) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := l.Addr().String()
	l.Close()
	d := startDaemon(t, "--api-tcp", addr)
	tok, err := os.ReadFile(filepath.Join(d.dataDir, "api-token"))
	if err != nil {
		t.Fatalf("token file: %v", err)
	}
	get := func(token string) int {
		req, _ := http.NewRequest("GET", "http://"+addr+"/v1/images", nil)
		if token != "" {
			req.Header.Set("Authorization", "Bearer "+token)
		}
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		return resp.StatusCode
	}
	if c := get(""); c != http.StatusUnauthorized {
		t.Fatalf("no token: status %d, want 401", c)
	}
	if c := get("wrong"); c != http.StatusUnauthorized {
		t.Fatalf("wrong token: status %d, want 401", c)
	}
	if c := get(strings.TrimSpace(string(tok))); c != http.StatusOK {
		t.Fatalf("right token: status %d, want 200", c)
	}
	r := d.shoal("--host", "tcp://"+addr, "--token", strings.TrimSpace(string(tok)), "image", "ls")
	if r.code != 0 {
		t.Fatalf("CLI over TCP with token: %d %s", r.code, r.stderr)
	}
	fi, err := os.Stat(d.sock)
	if err != nil || fi.Mode().Perm() != 0o600 {
		t.Fatalf("unix socket mode %v (%v), want 0600", fi.Mode().Perm(), err)
	}
}

func TestImagesThroughCLI(t *testing.T) {
	d := startDaemon(t)
	d.busybox("busybox:1")
	var imgs []struct {
		Ref, Digest string
		Layers      int
	}
	if err := json.Unmarshal([]byte(d.must("image", "ls", "-o", "json")), &imgs); err != nil {
		t.Fatal(err)
	}
	if len(imgs) != 1 || imgs[0].Ref != "busybox:1" || !strings.HasPrefix(imgs[0].Digest, "sha256:") || imgs[0].Layers != 1 {
		t.Fatalf("image ls = %+v", imgs)
	}
	out := d.must("image", "inspect", "busybox:1")
	if !strings.Contains(out, imgs[0].Digest) || !strings.Contains(out, "cmd:         /bin/sh") {
		t.Fatalf("inspect does not show the digest: %s", out)
	}
	if out := d.must("run", "--rm", imgs[0].Digest, "echo", "by digest"); out != "by digest\n" {
		t.Fatalf("run by digest printed %q", out)
	}
	d.must("run", "busybox:1", "true")
	r := d.shoal("image", "rm", "busybox:1")
	if r.code == 0 || !strings.Contains(r.stderr, "used by container") {
		t.Fatalf("removing an image a container uses: code %d stderr %q", r.code, r.stderr)
	}
	for _, c := range d.ps() {
		d.must("rm", c.ID)
	}
	d.must("image", "rm", "busybox:1")
	if out := d.must("image", "ls", "-o", "json"); strings.TrimSpace(out) != "[]" {
		t.Fatalf("after rm, image ls = %s", out)
	}
	if entries, _ := os.ReadDir(filepath.Join(d.dataDir, "images", "snapshots")); len(entries) != 0 {
		t.Fatalf("%d snapshots left after the only image was removed", len(entries))
	}
}

// gone waits until pid has exited (it may be reaped by init a moment later:
// the adopted container is no longer the daemon's child).
func gone(pid int) bool {
	for i := 0; i < 500; i++ {
		st, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
		if err != nil {
			return true
		}
		if f := strings.Fields(string(st)); len(f) > 2 && (f[2] == "Z" || f[2] == "X") {
			return true
		}
		time.Sleep(10 * time.Millisecond)
	}
	return false
}

// runAttached starts `shoal run ARGS...` from a CLI process that
// stays attached, waits until the container shows as running, and returns
// its row. The CLI process is killed when the test ends.
func (d *daemon) runAttached(args ...string) psRow {
	d.t.Helper()
	run := exec.Command(shoalBin, append([]string{"run"}, args...)...)
	run.Env = append(os.Environ(), "SHOAL_HOST=unix://"+d.sock)
	if err := run.Start(); err != nil {
		d.t.Fatal(err)
	}
	d.t.Cleanup(func() { run.Process.Kill(); run.Wait() })
	deadline := time.Now().Add(30 * time.Second)
	for time.Now().Before(deadline) {
		if rows := d.ps(); len(rows) == 1 && rows[0].Status == "running" && rows[0].Pid > 0 {
			return rows[0]
		}
		time.Sleep(20 * time.Millisecond)
	}
	d.t.Fatalf("container never showed as running: %+v", d.ps())
	return psRow{}
}

// TestBuildOptionsReachTheContainer builds an image with an entrypoint,
// command, environment, working directory and port, and checks a container
// of it sees them (and that run arguments replace the command only).
func TestBuildOptionsReachTheContainer(t *testing.T) {
	d := startDaemon(t)
	dir := filepath.Join(t.TempDir(), "rootfs")
	if err := imagetest.BusyboxDir(dir); err != nil {
		t.Fatal(err)
	}
	if err := os.MkdirAll(filepath.Join(dir, "srv/app"), 0o755); err != nil {
		t.Fatal(err)
	}
	d.must("image", "build", dir, "--tag", "opts:1", "--entrypoint", "/bin/sh", "--entrypoint", "-c",
		"--cmd", `echo "$GREETING from $(pwd)"`, "--env", "GREETING=hi", "--workdir", "/srv/app", "--port", "8080")
	if out := d.must("run", "--rm", "opts:1"); out != "hi from /srv/app\n" {
		t.Fatalf("default command printed %q", out)
	}
	if out := d.must("run", "--rm", "-e", "GREETING=hello", "opts:1", `echo "$GREETING"`); out != "hello\n" {
		t.Fatalf("run arguments with -e printed %q", out)
	}
	var img struct {
		Ports      []string `json:"ports"`
		Entrypoint []string `json:"entrypoint"`
	}
	if err := json.Unmarshal([]byte(d.must("image", "inspect", "opts:1", "-o", "json")), &img); err != nil {
		t.Fatal(err)
	}
	if len(img.Ports) != 1 || img.Ports[0] != "8080/tcp" || len(img.Entrypoint) != 2 {
		t.Fatalf("inspect: %+v", img)
	}
}
