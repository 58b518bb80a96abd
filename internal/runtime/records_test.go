package runtime

import (
	"bufio"
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/shoal-run/shoal/internal/errdefs"
	"github.com/shoal-run/shoal/internal/store"
)

const helperEnv = "SHOAL_RUNTIME_TEST_DAEMON"

// daemonHelper is a stand-in daemon run as a child process by
// TestRecoverAfterKill: it starts one container, prints its pid and waits to
// be killed.
func daemonHelper() int {
	args := strings.Split(os.Getenv(helperEnv), "|")
	root, rtRoot, db, id, layer := args[0], args[1], args[2], args[3], args[4]
	if err := BecomeSubreaper(); err != nil {
		fmt.Println("error", err)
		return 1
	}
	st, err := store.OpenBolt(db)
	if err != nil {
		fmt.Println("error", err)
		return 1
	}
	r, err := New(context.Background(), Options{Root: root, RuntimeRoot: rtRoot, Records: StoreRecords{S: st}, CgroupParent: testCgroupParent})
	if err != nil {
		fmt.Println("error", err)
		return 1
	}
	c, err := r.Run(context.Background(), Spec{ID: id, Layers: []string{layer}, Args: []string{"sleep", "300"}, Labels: map[string]string{"app": "web"}})
	if err != nil {
		fmt.Println("error", err)
		return 1
	}
	fmt.Println("pid", c.Pid)
	time.Sleep(10 * time.Minute)
	return 0
}

func TestStoreRecords(t *testing.T) {
	st, err := store.OpenBolt(filepath.Join(t.TempDir(), "db"))
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	rs := StoreRecords{S: st}
	ctx := context.Background()
	rec := Record{ID: "a", Bundle: "/b/a", Pid: 42, Created: time.Unix(1700000000, 0).UTC(), Labels: map[string]string{"k": "v"}, Runtime: "runc", CgroupsPath: "/shoal/a"}
	if err := rs.Put(ctx, rec); err != nil {
		t.Fatal(err)
	}
	got, err := rs.Get(ctx, "a")
	if err != nil || got.Pid != 42 || got.Labels["k"] != "v" || !got.Created.Equal(rec.Created) {
		t.Fatalf("get: %+v %v", got, err)
	}
	if kv, err := st.Get(ctx, store.ContainerKey("local", "a")); err != nil || !strings.Contains(string(kv.Value), `"pid":42`) {
		t.Fatalf("raw: %v %v", kv, err)
	}
	list, err := rs.List(ctx)
	if err != nil || len(list) != 1 {
		t.Fatalf("list: %+v %v", list, err)
	}
	if err := rs.Delete(ctx, "a"); err != nil {
		t.Fatal(err)
	}
	if err := rs.Delete(ctx, "a"); err != nil {
		t.Fatalf("second delete: %v", err)
	}
	if _, err := rs.Get(ctx, "a"); !errdefs.IsNotFound(err) {
		t.Fatalf("get deleted: %v", err)
	}
}

// TestRecoverAfterKill runs a daemon in another process, kills it with
// SIGKILL and adopts its container from the bbolt records.
func TestRecoverAfterKill(t *testing.T) {
	needRoot(t)
	dir := t.TempDir()
	root, rtRoot, db := filepath.Join(dir, "containers"), filepath.Join(dir, "runc"), filepath.Join(dir, "db")
	id := testID(t)
	cmd := exec.Command(os.Args[0], "-test.run", "^$")
	cmd.Env = append(os.Environ(), helperEnv+"="+strings.Join([]string{root, rtRoot, db, id, busyboxLayer(t)}, "|"))
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	cmd.Stderr = os.Stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	line, _ := bufio.NewReader(out).ReadString('\n')
	pid, err := strconv.Atoi(strings.TrimSpace(strings.TrimPrefix(line, "pid ")))
	if err != nil {
		_ = cmd.Process.Kill()
		_ = cmd.Wait()
		t.Fatalf("helper daemon said %q", line)
	}
	_ = cmd.Process.Signal(syscall.SIGKILL)
	_ = cmd.Wait()

	st, err := store.OpenBolt(db)
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	r, err := New(context.Background(), Options{Root: root, RuntimeRoot: rtRoot, Records: StoreRecords{S: st}, CgroupParent: testCgroupParent})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = r.Delete(context.Background(), id) })
	adopted, removed, err := r.Recover(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	if len(adopted) != 1 || adopted[0].ID != id || adopted[0].Pid != pid || adopted[0].Labels["app"] != "web" || len(removed) != 0 {
		t.Fatalf("adopted %+v removed %v, want %s with pid %d", adopted, removed, id, pid)
	}
	// Same process, not restarted: it is still pid 1's sleep in its namespace.
	var o strings.Builder
	if _, err := r.Exec(context.Background(), id, ExecSpec{Args: []string{"cat", "/proc/1/cmdline"}, Stdout: &o}); err != nil || !strings.HasPrefix(o.String(), "sleep") {
		t.Fatalf("exec in adopted container: %q %v", o.String(), err)
	}
	if err := r.Freeze(id); err != nil {
		t.Fatal(err)
	}
	if err := r.Delete(context.Background(), id); err != nil {
		t.Fatal(err)
	}
	assertGone(t, r, id)
}
