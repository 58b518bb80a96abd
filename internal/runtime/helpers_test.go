package runtime

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"
)

var (
	busyboxOnce sync.Once
	busyboxDir  string
	busyboxErr  error
	testTmp     string
	// testCgroupParent keeps this test binary's cgroups apart from any other
	// shoal runtime on the host (Recover removes unknown cgroups under its
	// parent). Helper processes inherit it through the environment.
	testCgroupParent string
)

const cgroupParentEnv = "SHOAL_TEST_CGROUP_PARENT"

func TestMain(m *testing.M) {
	testCgroupParent = os.Getenv(cgroupParentEnv)
	if testCgroupParent == "" {
		testCgroupParent = fmt.Sprintf("/shoal-test-%d", os.Getpid())
		os.Setenv(cgroupParentEnv, testCgroupParent)
	}
	if os.Getenv(helperEnv) != "" {
		os.Exit(daemonHelper())
	}
	var err error
	testTmp, err = os.MkdirTemp("", "shoal-runtime-test-")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	// Integration tests need the container inits as children.
	if os.Geteuid() == 0 {
		if err := BecomeSubreaper(); err != nil {
			fmt.Fprintln(os.Stderr, err)
			os.Exit(1)
		}
	}
	code := m.Run()
	os.RemoveAll(testTmp)
	removeCgroupParent(testCgroupParent)
	os.Exit(code)
}

// needRoot fails the test when the integration prerequisites are missing.
func needRoot(t *testing.T) {
	t.Helper()
	if os.Geteuid() != 0 {
		t.Fatal("integration test needs root (real runc, overlayfs, cgroups)")
	}
	if _, err := exec.LookPath("runc"); err != nil {
		t.Fatalf("integration test needs runc: %v", err)
	}
}

// busyboxLayer builds a one-layer busybox root filesystem: /bin/busybox with
// a symbolic link per applet, /etc/passwd and /etc/group.
func busyboxLayer(t *testing.T) string {
	t.Helper()
	busyboxOnce.Do(func() {
		dir := filepath.Join(testTmp, "busybox")
		busyboxDir, busyboxErr = dir, makeBusybox(dir)
	})
	if busyboxErr != nil {
		t.Fatalf("busybox layer: %v", busyboxErr)
	}
	return busyboxDir
}

func makeBusybox(dir string) error {
	bb, err := exec.LookPath("busybox")
	if err != nil {
		return err
	}
	for _, d := range []string{"bin", "etc", "tmp", "proc", "sys", "dev", "root", "home/app"} {
		if err := os.MkdirAll(filepath.Join(dir, d), 0o755); err != nil {
			return err
		}
	}
	if err := os.Chmod(filepath.Join(dir, "tmp"), 0o1777); err != nil {
		return err
	}
	data, err := os.ReadFile(bb)
	if err != nil {
		return err
	}
	if err := os.WriteFile(filepath.Join(dir, "bin", "busybox"), data, 0o755); err != nil {
		return err
	}
	out, err := exec.Command(bb, "--list").Output()
	if err != nil {
		return err
	}
	for _, a := range strings.Fields(string(out)) {
		if a == "busybox" {
			continue
		}
		if err := os.Symlink("busybox", filepath.Join(dir, "bin", a)); err != nil {
			return err
		}
	}
	files := map[string]string{
		"etc/passwd": "root:x:0:0:root:/root:/bin/sh\napp:x:1000:1000:app:/home/app:/bin/sh\nnobody:x:65534:65534:nobody:/nonexistent:/bin/false\n",
		"etc/group":  "root:x:0:\napp:x:1000:\nstaff:x:50:app\nnogroup:x:65534:\n",
	}
	for name, content := range files {
		if err := os.WriteFile(filepath.Join(dir, name), []byte(content), 0o644); err != nil {
			return err
		}
	}
	return nil
}

// newTestRuntime returns a Runtime on fresh roots with the given records.
func newTestRuntime(t *testing.T, records RecordStore) *Runtime {
	t.Helper()
	needRoot(t)
	dir := t.TempDir()
	r, err := New(context.Background(), Options{
		Root: filepath.Join(dir, "containers"), RuntimeRoot: filepath.Join(dir, "runc"), Records: records,
		CgroupParent: testCgroupParent,
	})
	if err != nil {
		t.Fatal(err)
	}
	return r
}

func testID(t *testing.T) string {
	b := make([]byte, 4)
	_, _ = rand.Read(b)
	name := strings.ToLower(strings.NewReplacer("/", "-", "_", "-").Replace(t.Name()))
	if len(name) > 40 {
		name = name[:40]
	}
	return "t-" + name + "-" + hex.EncodeToString(b)
}

// baseSpec is a container of the busybox layer running args.
func baseSpec(t *testing.T, args ...string) Spec {
	return Spec{ID: testID(t), Layers: []string{busyboxLayer(t)}, Args: args}
}

// run runs s and registers its deletion.
func run(t *testing.T, r *Runtime, s Spec) *Container {
	t.Helper()
	c, err := r.Run(context.Background(), s)
	if err != nil {
		t.Fatalf("run %s: %v", s.ID, err)
	}
	t.Cleanup(func() { _ = r.Delete(context.Background(), s.ID) })
	return c
}

// wait waits for a container with a generous bound so a hung test fails.
func wait(t *testing.T, r *Runtime, id string) ExitStatus {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	st, err := r.Wait(ctx, id)
	if err != nil {
		t.Fatalf("wait %s: %v", id, err)
	}
	return st
}

// capture runs args in a fresh container and returns exit status, stdout and
// stderr.
func capture(t *testing.T, r *Runtime, s Spec) (ExitStatus, string, string) {
	t.Helper()
	outR, outW, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	errR, errW, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	s.Stdout, s.Stderr = outW, errW
	var stdout, stderr bytes.Buffer
	var wg sync.WaitGroup
	wg.Add(2)
	go func() { defer wg.Done(); _, _ = stdout.ReadFrom(outR) }()
	go func() { defer wg.Done(); _, _ = stderr.ReadFrom(errR) }()
	_, runErr := r.Run(context.Background(), s)
	outW.Close()
	errW.Close()
	if runErr != nil {
		wg.Wait()
		t.Fatalf("run %s: %v (stderr %q)", s.ID, runErr, stderr.String())
	}
	t.Cleanup(func() { _ = r.Delete(context.Background(), s.ID) })
	st := wait(t, r, s.ID)
	wg.Wait()
	return st, stdout.String(), stderr.String()
}

// eventually polls cond up to a bound of attempts; it is for state the kernel
// changes asynchronously, not for timing.
func eventually(t *testing.T, what string, cond func() bool) {
	t.Helper()
	for i := 0; i < 600; i++ {
		if cond() {
			return
		}
		time.Sleep(50 * time.Millisecond)
	}
	t.Fatalf("%s: condition not reached", what)
}

// removeCgroupParent removes the (by now empty) parent cgroup in every
// hierarchy.
func removeCgroupParent(parent string) {
	roots, _ := filepath.Glob("/sys/fs/cgroup/*")
	roots = append(roots, "/sys/fs/cgroup")
	for _, r := range roots {
		os.Remove(filepath.Join(r, parent))
	}
}
