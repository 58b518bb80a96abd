package e2e

import (
	"bytes"
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
)

// TestDaemonBadFlags checks that bad daemon flags are usage errors naming
// the flag, and that nothing is created for them.
func TestDaemonBadFlags(t *testing.T) {
	base := t.TempDir()
	for _, c := range []struct {
		args []string
		want string
	}{
		{[]string{"--subnet", "ten-dot-something"}, "--subnet"},
		{[]string{"--bridge", "a-bridge-name-far-too-long"}, "--bridge"},
		{[]string{"--cgroup-parent", "/../etc"}, "--cgroup-parent"},
		{[]string{"--store", "mysql://x"}, "--store"},
		{[]string{"--runtime", "kata"}, "--runtime"},
		{[]string{"--node-name", "a/b"}, "--node-name"},
		{[]string{"--proxy", "8080"}, "--proxy"},
		{[]string{"--frozen-memory", "lots"}, "--frozen-memory"},
		{[]string{"--self-api-port", "70000"}, "--self-api-port"},
		{[]string{"--ui", "7080"}, "--ui"},
		{[]string{"--advertise", "0.0.0.0:7070"}, "--advertise"},
		{[]string{"--advertise", "10.0.0.1"}, "--advertise"},
		{[]string{"--node-ttl", "200ms"}, "--node-ttl"},
		{[]string{"--node-ttl", "soon"}, "--node-ttl"},
	} {
		data := filepath.Join(base, "data")
		args := append([]string{"daemon", "--data-dir", data, "--run-dir", filepath.Join(base, "run")}, c.args...)
		var stderr bytes.Buffer
		cmd := exec.Command(shoalBin, args...)
		cmd.Stderr = &stderr
		err := cmd.Run()
		ee, ok := err.(*exec.ExitError)
		if !ok || ee.ExitCode() != 2 || !strings.Contains(stderr.String(), c.want) {
			t.Errorf("shoal %v: %v, stderr %q; want exit 2 naming %s", c.args, err, stderr.String(), c.want)
		}
		if _, err := os.Stat(data); !os.IsNotExist(err) {
			t.Errorf("shoal %v created %s before refusing", c.args, data)
		}
	}
}

// TestSecondDaemonRefused starts a second daemon on the run dir of a live one:
// it must refuse before touching anything, and the first daemon's container
// must keep running.
func TestSecondDaemonRefused(t *testing.T) {
	d := startDaemon(t)
	d.busybox("busybox:1")
	before := d.runAttached("busybox:1", "sleep", "600")
	var stderr bytes.Buffer
	second := exec.Command(shoalBin, "daemon", "--data-dir", filepath.Join(t.TempDir(), "other"),
		"--run-dir", d.runDir, "--cgroup-parent", d.cgroup+"-other", "--bridge", d.bridge+"x", "--subnet", "10.187.0.0/24")
	second.Stderr = &stderr
	if err := second.Run(); err == nil || !strings.Contains(stderr.String(), "in use by another shoal daemon") {
		t.Fatalf("second daemon on the same run dir: %v, stderr %q", err, stderr.String())
	}
	rows := d.ps()
	if len(rows) != 1 || rows[0].Pid != before.Pid || rows[0].Status != "running" {
		t.Fatalf("after a refused second daemon ps = %+v, want %+v running", rows, before)
	}
	if !alive(before.Pid) {
		t.Fatalf("container pid %d died", before.Pid)
	}
}

// TestInfoAndDataDirMode checks what `shoal info` says about the runtime
// and that the data and run dirs are closed to other users.
func TestInfoAndDataDirMode(t *testing.T) {
	d := startDaemon(t)
	var h struct {
		Runtime string   `json:"runtime"`
		Notes   []string `json:"notes"`
	}
	if err := json.Unmarshal([]byte(d.must("info", "-o", "json")), &h); err != nil {
		t.Fatal(err)
	}
	if h.Runtime != "runc" && h.Runtime != "crun" {
		t.Fatalf("runtime %q", h.Runtime)
	}
	if h.Runtime == "runc" && (len(h.Notes) == 0 || !strings.Contains(strings.Join(h.Notes, " "), "crun")) {
		t.Fatalf("runc chosen with no note saying why crun is not used: %v", h.Notes)
	}
	for _, dir := range []string{d.dataDir, d.runDir} {
		fi, err := os.Stat(dir)
		if err != nil || fi.Mode().Perm() != 0o700 {
			t.Fatalf("%s mode %v (%v), want 0700", dir, fi.Mode().Perm(), err)
		}
	}
}

func alive(pid int) bool {
	st, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
	if err != nil {
		return false
	}
	f := strings.Fields(string(st))
	return len(f) > 2 && f[2] != "Z" && f[2] != "X"
}
