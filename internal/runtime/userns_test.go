package runtime

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
)

// TestUserNSPrivateBundle: a container in a user namespace starts from a
// bundle under a folder only the host's root may enter (its root file
// system is exposed under ExposeDir, for the container's root alone), its
// root directory is its root's, and nothing is left under ExposeDir once
// it is deleted.
func TestUserNSPrivateBundle(t *testing.T) {
	r := newTestRuntime(t, nil)
	if err := os.Chmod(filepath.Dir(r.root), 0o700); err != nil {
		t.Fatal(err)
	}
	const host = 3000000000
	if err := UserNSUsable(host, 65536); err != nil {
		t.Fatal(err)
	}
	s := baseSpec(t, "sh", "-c", "cat /proc/self/uid_map; stat -c %u:%g /; touch /made && stat -c %u /made")
	s.UserNS = &UserNS{HostID: host, Size: 65536}
	st, out, errOut := capture(t, r, s)
	if st.Code != 0 {
		t.Fatalf("exit %d: %s %s", st.Code, out, errOut)
	}
	f := strings.Fields(out)
	if len(f) != 5 || f[0] != "0" || f[1] != "3000000000" || f[2] != "65536" || f[3] != "0:0" || f[4] != "0" {
		t.Fatalf("uid map, owner of / and of a new file: %q", out)
	}
	dir := exposedDir(r.bundle(s.ID))
	if _, err := os.Stat(dir); err != nil {
		t.Fatalf("exposed root: %v", err)
	}
	if err := r.Delete(t.Context(), s.ID); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Lstat(dir); !os.IsNotExist(err) {
		t.Fatalf("%s left after delete: %v", dir, err)
	}
}

// TestMaskedKernelFiles: what tells of the host kernel's memory layout
// reads as empty in a container.
func TestMaskedKernelFiles(t *testing.T) {
	r := newTestRuntime(t, nil)
	files := []string{"/proc/slabinfo", "/proc/vmallocinfo", "/proc/iomem", "/proc/kallsyms", "/proc/zoneinfo"}
	for _, f := range files {
		if _, err := os.Stat(f); err != nil {
			t.Fatalf("host has no %s: %v", f, err)
		}
	}
	st, out, errOut := capture(t, r, baseSpec(t, "sh", "-c", "cat "+strings.Join(files, " ")+" | wc -c"))
	if st.Code != 0 || strings.TrimSpace(out) != "0" {
		t.Fatalf("masked files: exit %d, %q bytes read (%s)", st.Code, out, errOut)
	}
}

// TestUserNSExec: a process run in a container in a user namespace that
// joined a network namespace of the host's is in both (runc 1.1 joins the
// user namespace first, and then may not join the other).
func TestUserNSExec(t *testing.T) {
	r := newTestRuntime(t, nil)
	s := baseSpec(t, "sleep", "600")
	s.UserNS = &UserNS{HostID: 3000000000, Size: 65536}
	s.Capabilities = []string{"CHOWN", "DAC_OVERRIDE", "FOWNER", "FSETID", "KILL", "NET_BIND_SERVICE", "SETGID", "SETUID"}
	ns := "t-uns-" + s.ID[len(s.ID)-8:]
	if out, err := exec.Command("ip", "netns", "add", ns).CombinedOutput(); err != nil {
		t.Fatalf("%v %s", err, out)
	}
	t.Cleanup(func() { exec.Command("ip", "netns", "del", ns).Run() })
	s.NetNSPath = "/run/netns/" + ns
	run(t, r, s)
	var out strings.Builder
	st, err := r.Exec(t.Context(), s.ID, ExecSpec{Args: []string{"sh", "-c", "cat /proc/self/uid_map; readlink /proc/self/ns/net"}, Stdout: &out, Stderr: &out})
	if err != nil || st.Code != 0 || !strings.Contains(out.String(), "3000000000") {
		t.Fatalf("exec: %v, exit %d, %q", err, st.Code, out.String())
	}
	var nst syscall.Stat_t
	if err := syscall.Stat(s.NetNSPath, &nst); err != nil {
		t.Fatal(err)
	}
	if want := fmt.Sprintf("net:[%d]", nst.Ino); !strings.Contains(out.String(), want) {
		t.Fatalf("exec'd process not in the container's network namespace %s: %q", want, out.String())
	}
}
