package runtime

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"

	"github.com/opencontainers/runtime-spec/specs-go"

	"github.com/shoal-run/shoal/internal/errdefs"
)

func TestStdinEnvUserCwd(t *testing.T) {
	r := newTestRuntime(t, nil)
	s := baseSpec(t, "sh", "-c", `read line; echo "$line $FOO $(id -u):$(id -g) $(id -G) $(pwd) $HOME $(hostname)"`)
	s.Stdin = strings.NewReader("from-stdin\n")
	s.Env = []string{"FOO=bar"}
	s.User = "app"
	s.Cwd = "/tmp"
	s.Hostname = "box"
	_, out, errOut := capture(t, r, s)
	want := "from-stdin bar 1000:1000 1000 50 /tmp /home/app box\n"
	if out != want {
		t.Fatalf("got %q (stderr %q), want %q", out, errOut, want)
	}
	s = baseSpec(t, "id", "-u")
	s.User = "nobody-here"
	if _, err := r.Run(context.Background(), s); !errdefs.IsInvalid(err) || errdefs.Field(err) != "user" {
		t.Fatalf("unknown user: got %v, want invalid user", err)
	}
	assertGone(t, r, s.ID)
}

func TestSeccompAndReadOnlyRootfs(t *testing.T) {
	r := newTestRuntime(t, nil)
	s := baseSpec(t, "sh", "-c", `unshare -n true && echo unshare-ok; mount -t tmpfs x /mnt && echo mount-ok; echo done`)
	st, out, errOut := capture(t, r, s)
	if strings.Contains(out, "-ok") || !strings.Contains(out, "done") || st.Code != 0 {
		t.Fatalf("status %+v, out %q, stderr %q: unshare and mount must be refused", st, out, errOut)
	}
	if !strings.Contains(errOut, "Operation not permitted") {
		t.Fatalf("stderr %q: want EPERM", errOut)
	}
	// With CAP_SYS_ADMIN granted, the filter alone still refuses unshare and
	// mount; an allow-all filter lets the same commands through.
	admin := baseSpec(t, "sh", "-c", `unshare -m true && echo unshare-ok; mount -t tmpfs x /tmp && echo mount-ok; echo done`)
	admin.Capabilities = append(append([]string(nil), defaultCaps...), "CAP_SYS_ADMIN")
	_, out, errOut = capture(t, r, admin)
	if strings.Contains(out, "-ok") || !strings.Contains(errOut, "Operation not permitted") {
		t.Fatalf("default seccomp with SYS_ADMIN: out %q, stderr %q", out, errOut)
	}
	admin.ID = testID(t)
	admin.Seccomp = &specs.LinuxSeccomp{DefaultAction: specs.ActAllow}
	_, out, errOut = capture(t, r, admin)
	if !strings.Contains(out, "unshare-ok") || !strings.Contains(out, "mount-ok") {
		t.Fatalf("allow-all seccomp with SYS_ADMIN: out %q, stderr %q", out, errOut)
	}
	// Capability sets are the default minimal ones: CapEff has no SYS_ADMIN.
	_, out, _ = capture(t, r, baseSpec(t, "sh", "-c", `grep CapEff /proc/self/status; grep NoNewPrivs /proc/self/status; echo "nofile $(ulimit -n)"`))
	// CHOWN DAC_OVERRIDE FOWNER FSETID KILL SETGID SETUID SETPCAP
	// NET_BIND_SERVICE SYS_CHROOT MKNOD AUDIT_WRITE SETFCAP; no NET_RAW.
	if !strings.Contains(out, "CapEff:\t00000000a80405fb") {
		t.Fatalf("capabilities: %q", out)
	}
	var hostNofile syscall.Rlimit
	_ = syscall.Getrlimit(syscall.RLIMIT_NOFILE, &hostNofile)
	if want := fmt.Sprintf("nofile %d", min(hostNofile.Max, 1048576)); !strings.Contains(out, want) {
		t.Fatalf("%q: want %q", out, want)
	}
	if !strings.Contains(out, "NoNewPrivs:\t1") {
		t.Fatalf("no_new_privs not set: %q", out)
	}
	ro := baseSpec(t, "sh", "-c", `touch /x && echo wrote; touch /tmp/y && echo wrote-tmp; echo done`)
	ro.ReadOnlyRootfs = true
	st, out, errOut = capture(t, r, ro)
	if strings.Contains(out, "wrote") || !strings.Contains(errOut, "Read-only file system") {
		t.Fatalf("read-only rootfs: status %+v out %q stderr %q", st, out, errOut)
	}
}

func TestOverlayWhiteout(t *testing.T) {
	r := newTestRuntime(t, nil)
	dir := t.TempDir()
	lower, upper := filepath.Join(dir, "l1"), filepath.Join(dir, "l2")
	for _, d := range []string{filepath.Join(lower, "data"), filepath.Join(upper, "data")} {
		if err := os.MkdirAll(d, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	_ = os.WriteFile(filepath.Join(lower, "data", "hidden"), []byte("x"), 0o644)
	_ = os.WriteFile(filepath.Join(lower, "data", "kept"), []byte("k"), 0o644)
	// A whiteout is a 0/0 character device.
	if err := syscall.Mknod(filepath.Join(upper, "data", "hidden"), syscall.S_IFCHR, 0); err != nil {
		t.Fatal(err)
	}
	s := baseSpec(t, "ls", "/data")
	s.Layers = []string{busyboxLayer(t), lower, upper}
	_, out, errOut := capture(t, r, s)
	if strings.TrimSpace(out) != "kept" {
		t.Fatalf("ls /data = %q (stderr %q), want only kept", out, errOut)
	}
	// Writes land in the container's upper dir, never in a layer.
	w := baseSpec(t, "sh", "-c", "echo new > /data/kept")
	w.Layers = s.Layers
	capture(t, r, w)
	if b, _ := os.ReadFile(filepath.Join(lower, "data", "kept")); string(b) != "k" {
		t.Fatalf("layer was modified: %q", b)
	}
}
