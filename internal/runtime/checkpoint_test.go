package runtime

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	goruntime "runtime"

	"golang.org/x/sys/unix"
)

var (
	slowbootOnce sync.Once
	slowbootDir  string
	slowbootErr  error
)

// slowbootLayer builds the slowboot example into a layer of its own
// (/slowboot).
func slowbootLayer(t *testing.T) string {
	t.Helper()
	slowbootOnce.Do(func() {
		dir := filepath.Join(testTmp, "slowboot")
		cmd := exec.Command("go", "build", "-trimpath", "-ldflags=-s -w", "-o", filepath.Join(dir, "slowboot"), "../../examples/slowboot")
		cmd.Env = append(os.Environ(), "CGO_ENABLED=0")
		if out, err := cmd.CombinedOutput(); err != nil {
			slowbootErr = err
			slowbootDir = string(out)
			return
		}
		slowbootDir = dir
	})
	if slowbootErr != nil {
		t.Fatalf("build examples/slowboot: %v: %s", slowbootErr, slowbootDir)
	}
	return slowbootDir
}

// needCRIU fails the test when checkpoints cannot be taken here.
func needCRIU(t *testing.T, r *Runtime) {
	t.Helper()
	if err := r.CheckpointUsable(context.Background()); err != nil {
		t.Fatalf("checkpoint test: %v (scripts/install-deps.sh test builds CRIU)", err)
	}
}

// testNetNS makes a network namespace with its loopback up, removed when
// the test ends, and returns its path.
func testNetNS(t *testing.T) string {
	t.Helper()
	ns := "t-ck-" + testID(t)[len(testID(t))-8:]
	if out, err := exec.Command("ip", "netns", "add", ns).CombinedOutput(); err != nil {
		t.Fatalf("ip netns add: %v %s", err, out)
	}
	t.Cleanup(func() { exec.Command("ip", "netns", "del", ns).Run() })
	if out, err := exec.Command("ip", "-n", ns, "link", "set", "lo", "up").CombinedOutput(); err != nil {
		t.Fatalf("loopback up: %v %s", err, out)
	}
	return "/run/netns/" + ns
}

// getIn asks GET / of port 8080 on the loopback of the network namespace
// at ns, with a short timeout, and returns the answer's body.
func getIn(ns string) (string, error) {
	type result struct {
		body string
		err  error
	}
	ch := make(chan result, 1)
	go func() {
		// The thread stays locked and in the namespace: it ends with the
		// goroutine.
		goruntime.LockOSThread()
		fd, err := unix.Open(ns, unix.O_RDONLY|unix.O_CLOEXEC, 0)
		if err != nil {
			ch <- result{err: err}
			return
		}
		defer unix.Close(fd)
		if err := unix.Setns(fd, unix.CLONE_NEWNET); err != nil {
			ch <- result{err: err}
			return
		}
		conn, err := net.DialTimeout("tcp", "127.0.0.1:8080", 5*time.Second)
		if err != nil {
			ch <- result{err: err}
			return
		}
		defer conn.Close()
		_ = conn.SetDeadline(time.Now().Add(10 * time.Second))
		if _, err := conn.Write([]byte("GET / HTTP/1.0\r\nHost: x\r\n\r\n")); err != nil {
			ch <- result{err: err}
			return
		}
		resp, err := http.ReadResponse(bufio.NewReader(conn), nil)
		if err != nil {
			ch <- result{err: err}
			return
		}
		defer resp.Body.Close()
		b, err := io.ReadAll(resp.Body)
		ch <- result{string(b), err}
	}()
	r := <-ch
	return r.body, r.err
}

// lines reads a pipe line by line onto a channel.
func lines(r *os.File) <-chan string {
	ch := make(chan string, 1024)
	go func() {
		defer close(ch)
		sc := bufio.NewScanner(r)
		for sc.Scan() {
			ch <- sc.Text()
		}
	}()
	return ch
}

// slowbootSpec is slowboot in its own network namespace, its output on a
// pipe whose read end is returned.
func slowbootSpec(t *testing.T) (Spec, *os.File) {
	t.Helper()
	s := Spec{ID: testID(t), Layers: []string{busyboxLayer(t), slowbootLayer(t)}, Args: []string{"/slowboot"},
		Env:       []string{"PORT=8080", "BOOT_DELAY=300ms", "GODEBUG=multipathtcp=0"},
		NetNSPath: testNetNS(t), Checkpointable: true}
	pr, pw, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { pr.Close() })
	s.Stdout, s.Stderr = pw, pw
	return s, pr
}

// runClosing runs s, then closes its output pipe's write end (the
// container holds it).
func runClosing(t *testing.T, r *Runtime, s Spec) {
	t.Helper()
	_, err := r.Run(context.Background(), s)
	s.Stdout.Close()
	if err != nil {
		t.Fatalf("run %s: %v", s.ID, err)
	}
	t.Cleanup(func() { _ = r.Delete(context.Background(), s.ID) })
}

func waitHTTP(t *testing.T, ns string) string {
	t.Helper()
	var body string
	var err error
	for i := 0; i < 600; i++ {
		if body, err = getIn(ns); err == nil && strings.HasPrefix(body, "slowboot from ") {
			return body
		}
		time.Sleep(50 * time.Millisecond)
	}
	t.Fatalf("slowboot does not answer in %s: %v: %s", ns, err, body)
	return ""
}

// TestCheckpointRestoreSlowboot: a frozen slowboot replica is dumped
// (ending it), restored into a new container with a network namespace of
// its own, and answers HTTP there as the same process (the same start
// time), with nothing of either container left once deleted.
func TestCheckpointRestoreSlowboot(t *testing.T) {
	r := newTestRuntime(t, nil)
	needCRIU(t, r)
	s, out := slowbootSpec(t)
	runClosing(t, r, s)
	first := waitHTTP(t, s.NetNSPath)
	if err := r.Freeze(s.ID); err != nil {
		t.Fatal(err)
	}
	img := filepath.Join(t.TempDir(), "img")
	if err := r.Checkpoint(context.Background(), s.ID, img); err != nil {
		t.Fatalf("checkpoint: %v", err)
	}
	st := wait(t, r, s.ID)
	t.Logf("dumped container ended: %+v", st)
	for range lines(out) { // the dumped container's pipe is closed: nobody holds it
	}
	if err := r.Delete(context.Background(), s.ID); err != nil {
		t.Fatal(err)
	}

	rs, rout := slowbootSpec(t)
	rs.RestoreFrom = img
	runClosing(t, r, rs)
	second := waitHTTP(t, rs.NetNSPath)
	if first != second {
		t.Fatalf("restored slowboot answers %q, want the dumped process's %q", second, first)
	}
	c, err := r.Get(rs.ID)
	if err != nil || c.Status != StatusRunning {
		t.Fatalf("restored container: %+v, %v", c, err)
	}
	if err := r.Delete(context.Background(), rs.ID); err != nil {
		t.Fatal(err)
	}
	for range lines(rout) { // the restored container held the new pipe, and is gone
	}
	for _, id := range []string{s.ID, rs.ID} {
		for _, p := range []string{r.bundle(id), r.specDir(id), r.stateDir(id)} {
			if _, err := os.Stat(p); !os.IsNotExist(err) {
				t.Errorf("%s left behind (%v)", p, err)
			}
		}
		if r.cgroupPaths(id).Exists() {
			t.Errorf("cgroup of %s left behind", id)
		}
	}
}

// TestCheckpointRestoreLogPipe: a restored container writes to the pipes
// its restore was given, not to the dumped container's: its output goes
// on where it stopped, on the new pipe.
func TestCheckpointRestoreLogPipe(t *testing.T) {
	r := newTestRuntime(t, nil)
	needCRIU(t, r)
	count := func() (Spec, <-chan string) {
		s := baseSpec(t, "sh", "-c", "i=0; while :; do echo $i; i=$((i+1)); sleep 0.05; done")
		s.NetNSPath, s.Checkpointable = testNetNS(t), true
		pr, pw, err := os.Pipe()
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { pr.Close() })
		s.Stdout, s.Stderr = pw, pw
		return s, lines(pr)
	}
	s, out := count()
	runClosing(t, r, s)
	<-out
	<-out
	img := filepath.Join(t.TempDir(), "img")
	if err := r.Checkpoint(context.Background(), s.ID, img); err != nil {
		t.Fatalf("checkpoint: %v", err)
	}
	last := -1
	for l := range out {
		last, _ = strconv.Atoi(l)
	}
	if err := r.Delete(context.Background(), s.ID); err != nil {
		t.Fatal(err)
	}
	rs, rout := count()
	rs.RestoreFrom = img
	runClosing(t, r, rs)
	select {
	case l := <-rout:
		if n, err := strconv.Atoi(l); err != nil || n <= last || n > last+3 {
			t.Fatalf("restored container's first line %q, want the one after %d", l, last)
		}
	case <-time.After(60 * time.Second):
		t.Fatal("restored container wrote nothing to its new pipe")
	}
}

// TestCheckpointFailedDumpKeepsRunning: a dump CRIU refuses (the
// container's output is a file of the host's, outside its mounts) leaves
// the container running, frozen again as it was, and says why.
func TestCheckpointFailedDumpKeepsRunning(t *testing.T) {
	r := newTestRuntime(t, nil)
	needCRIU(t, r)
	s := baseSpec(t, "sh", "-c", "while :; do echo x; sleep 0.05; done")
	s.NetNSPath, s.Checkpointable = testNetNS(t), true
	f, err := os.Create(filepath.Join(t.TempDir(), "out"))
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	s.Stdout, s.Stderr = f, f
	run(t, r, s)
	if err := r.Freeze(s.ID); err != nil {
		t.Fatal(err)
	}
	img := filepath.Join(t.TempDir(), "img")
	err = r.Checkpoint(context.Background(), s.ID, img)
	if err == nil {
		t.Fatal("checkpoint of a container writing to a host file succeeded")
	}
	t.Logf("checkpoint: %v", err)
	c, serr := r.Get(s.ID)
	if serr != nil || c.Status != StatusPaused {
		t.Fatalf("after a failed dump: %+v, %v; want it paused as it was", c, serr)
	}
	if err := r.Thaw(s.ID); err != nil {
		t.Fatal(err)
	}
	fi, _ := f.Stat()
	size := fi.Size()
	eventually(t, "the container writes on after the failed dump", func() bool {
		fi, _ := f.Stat()
		return fi.Size() > size+4
	})
}

// TestCheckpointNotCheckpointable: a container not made for it is
// refused before CRIU runs, and keeps running.
func TestCheckpointNotCheckpointable(t *testing.T) {
	r := newTestRuntime(t, nil)
	s := baseSpec(t, "sleep", "600")
	run(t, r, s)
	err := r.Checkpoint(context.Background(), s.ID, filepath.Join(t.TempDir(), "img"))
	if err == nil || !strings.Contains(err.Error(), "not checkpointable") {
		t.Fatalf("checkpoint of a plain container: %v", err)
	}
	if c, err := r.Get(s.ID); err != nil || c.Status != StatusRunning {
		t.Fatalf("after a refused checkpoint: %+v, %v", c, err)
	}
}

// TestCheckpointRestoreUserNS: a slowboot container in a user namespace
// of its own, in a network namespace the host's user namespace owns (the
// runtime runs in it), is dumped and restored into another such
// namespace, and answers there as the same process, root in the
// namespace still the range's first id. Its images can be read by the
// host's root and by that range's root alone.
func TestCheckpointRestoreUserNS(t *testing.T) {
	r := newTestRuntime(t, nil)
	needCRIU(t, r)
	const host = 3000131072
	if err := UserNSUsable(host, 65536); err != nil {
		t.Fatal(err)
	}
	// A bind mount from under a folder only the host's root may enter,
	// as the daemon's secrets and volumes are.
	private := filepath.Join(t.TempDir(), "private")
	if err := os.MkdirAll(filepath.Join(private, "data"), 0o700); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(private, "data", "f"), []byte("kept"), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.Chmod(filepath.Join(private, "data"), 0o755); err != nil {
		t.Fatal(err)
	}
	mounts := []Mount{{Source: filepath.Join(private, "data"), Destination: "/data", ReadOnly: true}}
	s, _ := slowbootSpec(t)
	s.UserNS, s.Mounts = &UserNS{HostID: host, Size: 65536}, mounts
	runClosing(t, r, s)
	first := waitHTTP(t, s.NetNSPath)
	if err := r.Freeze(s.ID); err != nil {
		t.Fatal(err)
	}
	img := filepath.Join(t.TempDir(), "img")
	if err := r.Checkpoint(context.Background(), s.ID, img); err != nil {
		t.Fatalf("checkpoint: %v", err)
	}
	wait(t, r, s.ID)
	if err := r.Delete(context.Background(), s.ID); err != nil {
		t.Fatal(err)
	}
	rs, _ := slowbootSpec(t)
	rs.UserNS, rs.Mounts = &UserNS{HostID: host, Size: 65536}, mounts
	rs.RestoreFrom = img
	runClosing(t, r, rs)
	second := waitHTTP(t, rs.NetNSPath)
	if first != second {
		t.Fatalf("restored slowboot answers %q, want the dumped process's %q", second, first)
	}
	c, err := r.Get(rs.ID)
	if err != nil || c.Status != StatusRunning {
		t.Fatalf("restored container: %+v, %v", c, err)
	}
	m, err := os.ReadFile("/proc/" + strconv.Itoa(c.Pid) + "/uid_map")
	if f := strings.Fields(string(m)); err != nil || len(f) != 3 || f[0] != "0" || f[1] != strconv.Itoa(host) || f[2] != "65536" {
		t.Fatalf("restored container's uid map: %q, %v", m, err)
	}
	var st unix.Stat_t
	if err := unix.Stat(filepath.Join(img, "inventory.img"), &st); err != nil || st.Uid != 0 || st.Gid != host || st.Mode&0o007 != 0 {
		t.Fatalf("image owner %d:%d mode %o, %v; want 0:%d, nothing for others", st.Uid, st.Gid, st.Mode, err, host)
	}
	if b, err := os.ReadFile(fmt.Sprintf("/proc/%d/root/data/f", c.Pid)); err != nil || string(b) != "kept" {
		t.Fatalf("restored container's /data/f: %q, %v", b, err)
	}
	if err := r.Delete(context.Background(), rs.ID); err != nil {
		t.Fatal(err)
	}
	for _, id := range []string{s.ID, rs.ID} {
		if dir := exposedDir(r.bundle(id)); func() bool { _, err := os.Lstat(dir); return !os.IsNotExist(err) }() {
			t.Errorf("%s left behind", dir)
		}
	}
}
