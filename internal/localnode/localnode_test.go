package localnode

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"io/fs"
	"log/slog"
	mrand "math/rand/v2"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/shoal-run/shoal/internal/clock"
	"github.com/shoal-run/shoal/internal/errdefs"
	"github.com/shoal-run/shoal/internal/image"
	"github.com/shoal-run/shoal/internal/image/imagetest"
	"github.com/shoal-run/shoal/internal/manifest"
	"github.com/shoal-run/shoal/internal/network"
	"github.com/shoal-run/shoal/internal/node"
	"github.com/shoal-run/shoal/internal/runtime"
	"github.com/shoal-run/shoal/internal/sandbox/stub/stubtest"
)

func TestMain(m *testing.M) {
	if os.Geteuid() == 0 {
		// Container inits become this process's children, so their exit
		// status is known.
		if err := runtime.BecomeSubreaper(); err != nil {
			fmt.Fprintln(os.Stderr, err)
			os.Exit(1)
		}
	}
	os.Exit(m.Run())
}

// host is a Node on a real runc, image store (with busybox:1) and bridge
// network, each with state and names of its own.
type host struct {
	n      *Node
	o      Options
	rt     *runtime.Runtime
	net    *network.Manager
	img    image.Image
	dir    string // the apps folder
	router *idleRouter
}

func newHost(t *testing.T) *host {
	t.Helper()
	if os.Geteuid() != 0 {
		t.Fatal("localnode tests need root: they run real containers with runc")
	}
	if _, err := exec.LookPath("runc"); err != nil {
		t.Fatalf("localnode tests need runc: %v", err)
	}
	dir := t.TempDir()
	ctx := context.Background()
	parent := fmt.Sprintf("/shoal-localnode-test-%d-%d", os.Getpid(), mrand.IntN(1<<30))
	rt, err := runtime.New(ctx, runtime.Options{
		Root: filepath.Join(dir, "containers"), RuntimeRoot: filepath.Join(dir, "runc"), CgroupParent: parent,
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		rt.Close()
		roots, _ := filepath.Glob("/sys/fs/cgroup/*")
		for _, r := range append(roots, "/sys/fs/cgroup") {
			os.Remove(filepath.Join(r, parent))
		}
	})
	imgs, err := image.Open(filepath.Join(dir, "images"), image.WithLogger(slog.New(slog.DiscardHandler)))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { imgs.Close() })
	img := imagetest.Busybox(t, imgs, "busybox:1")
	nm, err := network.New(ctx, network.Options{
		StateDir: filepath.Join(dir, "netns"), CNIConfDir: filepath.Join(dir, "cni"),
		Bridge: fmt.Sprintf("shoalln%d", mrand.IntN(10000)), Subnet: fmt.Sprintf("10.239.%d.0/24", mrand.IntN(250)), PoolSize: 1,
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { nm.Close(context.Background()) })
	apps := filepath.Join(dir, "apps")
	if err := os.Mkdir(apps, 0o700); err != nil {
		t.Fatal(err)
	}
	h := &host{rt: rt, net: nm, img: img, dir: apps, router: &idleRouter{}}
	h.o = Options{Runtime: rt, Images: imgs, Network: nm, Router: h.router, Dir: apps,
		Logger: slog.New(slog.DiscardHandler)}
	if h.n, err = New(h.o); err != nil {
		t.Fatal(err)
	}
	return h
}

// idleRouter is a router whose replicas have no request in flight unless
// busy is set: then WaitIdle waits until its context ends.
type idleRouter struct{ busy bool }

func (r *idleRouter) WaitIdle(ctx context.Context, _ string) error {
	if !r.busy {
		return nil
	}
	<-ctx.Done()
	return ctx.Err()
}

// newID is a replica id of app lnt no other test uses.
func newID(t *testing.T) string {
	b := make([]byte, 4)
	rand.Read(b)
	return "lnt-" + hex.EncodeToString(b)
}

// config is app lnt's manifest with the given command.
func config(t *testing.T, command string) manifest.Config {
	t.Helper()
	cfg, err := manifest.Parse([]byte(fmt.Sprintf("name = \"lnt\"\nimage = \"busybox:1\"\nport = 8080\ncommand = %s\n", command)), "shoal.toml")
	if err != nil {
		t.Fatal(err)
	}
	return cfg
}

// poll waits up to 30 s for cond to hold.
func poll(t *testing.T, what string, cond func() error) {
	t.Helper()
	var err error
	for deadline := time.Now().Add(30 * time.Second); time.Now().Before(deadline); time.Sleep(20 * time.Millisecond) {
		if err = cond(); err == nil {
			return
		}
	}
	t.Fatalf("%s: %v", what, err)
}

// TestReplicaLadder walks a real replica along the ladder: started with its
// log, volume, address and environment; checked by TCP and by a command in
// its container; frozen (and so adopted by a node of a restarted daemon),
// thawed, resized, stopped (SIGTERM first) with its exit status told, and removed with its
// address.
func TestReplicaLadder(t *testing.T) {
	h := newHost(t)
	ctx := context.Background()
	id := newID(t)
	vol := filepath.Join(h.dir, "lnt", "volumes", "data")
	if err := os.MkdirAll(vol, 0o755); err != nil {
		t.Fatal(err)
	}
	logPath := filepath.Join(h.dir, "lnt", id+".log")
	s := node.ReplicaSpec{ID: id, App: "lnt", Revision: 3, Digest: h.img.Digest, Log: logPath,
		Config: config(t, `["sh", "-c", "echo started $SHOAL_REPLICA $SHOAL_REVISION $EXTRA; echo kept > /data/x; httpd -p $PORT; trap 'exit 7' TERM; while :; do sleep 0.1; done"]`),
		Env:    []string{"EXTRA=more"}, Mounts: []node.Mount{{Source: vol, Destination: "/data"}}}
	st, err := h.n.Start(ctx, s)
	t.Cleanup(func() { h.n.Remove(context.Background(), id) })
	if err != nil {
		t.Fatalf("start: %v", err)
	}
	if st.Pid <= 0 || !strings.HasSuffix(st.Addr, ":8080") || st.Node != "" {
		t.Fatalf("started %+v; want a pid and an address on port 8080", st)
	}
	tcp := manifest.Health{TCP: true, Timeout: manifest.Duration{Duration: 2 * time.Second}}
	poll(t, "TCP check", func() error { return h.n.Check(ctx, id, st.Addr, tcp) })
	if b, err := os.ReadFile(logPath); err != nil || !strings.Contains(string(b), "started "+id+" 3 more") {
		t.Fatalf("log %q (%v); want the replica's output with its environment", b, err)
	}
	if b, err := os.ReadFile(filepath.Join(vol, "x")); err != nil || string(b) != "kept\n" {
		t.Fatalf("volume file %q (%v); want the replica's write", b, err)
	}
	cmd := manifest.Health{Command: []string{"sh", "-c", "test -f /data/x"}, Timeout: manifest.Duration{Duration: 10 * time.Second}}
	if err := h.n.Check(ctx, id, st.Addr, cmd); err != nil {
		t.Fatalf("command check: %v", err)
	}
	cmd.Command = []string{"sh", "-c", "echo sick; exit 3"}
	if err := h.n.Check(ctx, id, st.Addr, cmd); err == nil || !strings.Contains(err.Error(), "exited with code 3: sick") {
		t.Fatalf("failing command check: %v; want its exit code and output", err)
	}
	if u, err := h.n.Usage(ctx, id); err != nil || u.Used <= 0 {
		t.Fatalf("usage: %+v, %v; want the CPU time its processes used", u, err)
	}
	if err := h.n.SetCPU(ctx, id, 0.5); err != nil {
		t.Fatalf("set CPU: %v", err)
	}

	if _, err := h.n.Freeze(ctx, id); err != nil {
		t.Fatalf("freeze: %v", err)
	}
	// A restarted daemon's node finds it frozen, with its pid and address.
	again, err := New(h.o)
	if err != nil {
		t.Fatal(err)
	}
	ad, err := again.Adopt(ctx, node.Known{ID: id, App: "lnt", Port: 8080})
	if err != nil || !ad.Running || !ad.Frozen || ad.Pid != st.Pid || ad.Addr != st.Addr {
		t.Fatalf("adopt: %+v, %v; want running, frozen, pid %d, address %s", ad, err, st.Pid, st.Addr)
	}
	if err := again.Thaw(ctx, id); err != nil {
		t.Fatalf("thaw: %v", err)
	}
	poll(t, "TCP check after the thaw", func() error { return again.Check(ctx, id, st.Addr, tcp) })

	waited := make(chan node.ExitStatus, 1)
	go func() { es, _ := again.Wait(ctx, id); waited <- es }()
	if err := again.Stop(ctx, id, 10*time.Second); err != nil {
		t.Fatalf("stop: %v", err)
	}
	select {
	case es := <-waited:
		if !es.Known || es.Code != 7 || es.Signal != 0 {
			t.Fatalf("exit status %+v; want known, code 7 (its SIGTERM trap)", es)
		}
	case <-time.After(30 * time.Second):
		t.Fatal("wait did not return once the replica stopped")
	}
	if err := again.Remove(ctx, id); err != nil {
		t.Fatalf("remove: %v", err)
	}
	if _, err := h.rt.Get(id); !errdefs.IsNotFound(err) {
		t.Fatalf("container after remove: %v; want not found", err)
	}
	if _, ok := h.net.Lookup(id); ok {
		t.Fatal("the replica's address is still held after remove")
	}
	if ad, err := again.Adopt(ctx, node.Known{ID: id, App: "lnt", Port: 8080}); err != nil || ad.Running {
		t.Fatalf("adopt of a removed replica: %+v, %v; want not running, no error", ad, err)
	}
}

// TestRunHook runs a merge hook in a container of the image that sees the
// mounts it is given, tells its exit code, writes its output to its log,
// and leaves no container behind; one whose context ends is killed, and
// removed too.
func TestRunHook(t *testing.T) {
	h := newHost(t)
	ctx := context.Background()
	state, vol := t.TempDir(), t.TempDir()
	if err := os.WriteFile(filepath.Join(state, "in"), []byte("from the replica\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	logf, err := os.Create(filepath.Join(t.TempDir(), "hook.log"))
	if err != nil {
		t.Fatal(err)
	}
	defer logf.Close()
	hook := node.Hook{ID: newID(t) + "-merge", App: "lnt", Replica: "lnt-1", Layers: h.img.Layers, User: h.img.Config.User,
		Args:   []string{"sh", "-c", "cat /state/in >> /vol/out; echo merged $SHOAL_STATE_DIR; exit 3"},
		Env:    []string{"PATH=/bin", "SHOAL_STATE_DIR=/state"},
		Mounts: []node.Mount{{Source: state, Destination: "/state"}, {Source: vol, Destination: "/vol"}},
		Log:    logf}
	es, err := h.n.RunHook(ctx, hook)
	if err != nil || !es.Known || es.Code != 3 {
		t.Fatalf("hook: %+v, %v; want exit code 3", es, err)
	}
	if b, err := os.ReadFile(filepath.Join(vol, "out")); err != nil || string(b) != "from the replica\n" {
		t.Fatalf("merged %q (%v); want the state appended to the volume", b, err)
	}
	if b, err := os.ReadFile(logf.Name()); err != nil || !strings.Contains(string(b), "merged /state") {
		t.Fatalf("hook log %q (%v); want its output", b, err)
	}
	if _, err := h.rt.Get(hook.ID); !errdefs.IsNotFound(err) {
		t.Fatalf("hook container after its run: %v; want not found", err)
	}

	hook.ID = newID(t) + "-merge"
	hook.Args = []string{"sleep", "600"}
	cctx, cancel := context.WithTimeout(ctx, 3*time.Second)
	defer cancel()
	if _, err := h.n.RunHook(cctx, hook); err == nil {
		t.Fatal("a hook whose context ended returned no error")
	}
	if _, err := h.rt.Get(hook.ID); !errdefs.IsNotFound(err) {
		t.Fatalf("container of a hook cut short: %v; want not found", err)
	}
}

// fileHost is a Node whose runtime and network are never called: for the
// work a node does on files of its apps folder alone.
func fileHost(t *testing.T, o Options) *Node {
	t.Helper()
	o.Runtime, o.Images, o.Network = struct{ Runtime }{}, struct{ Images }{}, struct{ Network }{}
	if o.Router == nil {
		o.Router = &idleRouter{}
	}
	if o.Dir == "" {
		o.Dir = t.TempDir()
	}
	n, err := New(o)
	if err != nil {
		t.Fatal(err)
	}
	return n
}

// TestPeerPaths: the relative paths of a spec from another node are put
// under this node's apps folder, their folders made; a path that leaves it
// is refused. Logs and state areas are read and dropped there only.
func TestPeerPaths(t *testing.T) {
	n := fileHost(t, Options{})
	s, err := n.localize(node.ReplicaSpec{ID: "web-1", Log: "web/logs/web-1.log",
		Mounts: []node.Mount{{Source: "web/state/live/web-1/data", Destination: "/state"}, {Source: "/abs", Destination: "/abs"}}})
	if err != nil {
		t.Fatal(err)
	}
	if want := filepath.Join(n.dir, "web/logs/web-1.log"); s.Log != want {
		t.Fatalf("log %s; want %s", s.Log, want)
	}
	if fi, err := os.Stat(filepath.Join(n.dir, "web/state/live/web-1/data")); err != nil || !fi.IsDir() {
		t.Fatalf("mount source not made: %v", err)
	}
	if s.Mounts[1].Source != "/abs" {
		t.Fatalf("absolute mount source changed to %s", s.Mounts[1].Source)
	}
	for _, bad := range []node.ReplicaSpec{{Log: "../escape.log"}, {Log: "web/x.log", Mounts: []node.Mount{{Source: "../../etc", Destination: "/etc"}}}} {
		if _, err := n.localize(bad); err == nil {
			t.Fatalf("localize %+v: no error; want the path refused", bad)
		}
	}

	if err := os.WriteFile(s.Log, []byte("one\ntwo\nthree\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	tail, err := n.TailLog(context.Background(), "web-1", "web/logs/web-1.log", 2)
	if err != nil || strings.Join(tail.Lines, ",") != "two,three" {
		t.Fatalf("tail %+v, %v; want the last two lines", tail, err)
	}
	if _, err := n.TailLog(context.Background(), "web-1", "../../etc/passwd.log", 2); !errdefs.IsInvalid(err) {
		t.Fatalf("tail of a path out of the apps folder: %v; want invalid", err)
	}

	data := filepath.Join(n.dir, "web/state/live/web-1/data")
	if err := os.WriteFile(filepath.Join(data, "f"), []byte("state"), 0o600); err != nil {
		t.Fatal(err)
	}
	var tar strings.Builder
	if err := n.SendState(context.Background(), "web-1", "web/state/live/web-1/data", &tar); err != nil || !strings.Contains(tar.String(), "state") {
		t.Fatalf("send state: %v; want a tar with the area's file", err)
	}
	if err := n.SendState(context.Background(), "web-1", "../x", &tar); err == nil {
		t.Fatal("send state of a path out of the apps folder: no error")
	}
	if err := n.DropState(context.Background(), "web-1", "web/state/live/web-1"); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Lstat(filepath.Join(n.dir, "web/state/live/web-1")); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("state area after drop: %v; want gone", err)
	}
	if err := n.DropState(context.Background(), "web-1", "/"); err == nil {
		t.Fatal("drop of an absolute path: no error")
	}
}

// TestDrain: a drain returns once the router has no request in flight to
// the replica; with a request in flight, with an error once grace has
// passed on the node's clock, at once for no grace.
func TestDrain(t *testing.T) {
	fc := clock.NewFake(time.Unix(1e9, 0))
	r := &idleRouter{}
	n := fileHost(t, Options{Router: r, Clock: fc})
	ctx := context.Background()
	if err := n.Drain(ctx, "web-1", time.Minute); err != nil {
		t.Fatalf("drain of an idle replica: %v", err)
	}
	r.busy = true
	if err := n.Drain(ctx, "web-1", 0); err == nil {
		t.Fatal("drain of a busy replica without grace: no error")
	}
	done := make(chan error, 1)
	go func() { done <- n.Drain(ctx, "web-1", time.Minute) }()
	for i := 0; fc.Timers() == 0; i++ {
		if i > 10000 {
			t.Fatal("the drain set no timer")
		}
		time.Sleep(time.Millisecond)
	}
	fc.Advance(time.Minute - time.Second)
	select {
	case err := <-done:
		t.Fatalf("drain ended before its grace: %v", err)
	default:
	}
	fc.Advance(time.Second)
	select {
	case err := <-done:
		if err == nil {
			t.Fatal("drain past its grace: no error")
		}
	case <-time.After(10 * time.Second):
		t.Fatal("drain did not end once its grace had passed")
	}
}

// slowDeleteRuntime's Delete gives up only when its context ends, as
// waiting for a container's init that does not exit does.
type slowDeleteRuntime struct{ Runtime }

func (slowDeleteRuntime) Delete(ctx context.Context, id string) error {
	<-ctx.Done()
	return fmt.Errorf("container %q: delete: wait for exit: %w", id, ctx.Err())
}

// releaseNetwork records the state of the context Release got.
type releaseNetwork struct {
	Network
	released chan error
}

func (n releaseNetwork) Lookup(string) (*network.Attachment, bool) {
	return &network.Attachment{}, true
}

func (n releaseNetwork) Release(ctx context.Context, _ *network.Attachment) error {
	n.released <- ctx.Err()
	return ctx.Err()
}

// TestRemoveReleasesNetworkAfterSlowDelete: a delete that uses up the
// removal's context still leaves the release of the replica's network a
// context of its own (before, the CNI DEL ran on an expired one and the
// replica's address and nat rule stayed).
func TestRemoveReleasesNetworkAfterSlowDelete(t *testing.T) {
	n := fileHost(t, Options{})
	rel := releaseNetwork{released: make(chan error, 1)}
	n.rt, n.net = slowDeleteRuntime{}, rel
	ctx, cancel := context.WithTimeout(context.Background(), time.Millisecond)
	defer cancel()
	if err := n.Remove(ctx, "r1"); err == nil {
		t.Fatal("remove: no error though the delete failed")
	}
	if err := <-rel.released; err != nil {
		t.Fatalf("the network was released on an ended context: %v", err)
	}
}

// failOnceDelete fails its first Delete, then finds nothing to delete.
type failOnceDelete struct {
	Runtime
	failed *bool
}

func (f failOnceDelete) Delete(_ context.Context, id string) error {
	if !*f.failed {
		*f.failed = true
		return fmt.Errorf("container %q: delete: device or resource busy", id)
	}
	return fmt.Errorf("container %q: %w", id, errdefs.ErrNotFound)
}

// A replica whose delete failed keeps its secrets folder (it may still
// run, reading them); the removal made again once the delete succeeds
// (serving tries it again with back-off) removes the folder.
func TestRemoveDropsSecretsOnceDeleted(t *testing.T) {
	n := fileHost(t, Options{})
	n.secretsRoot = t.TempDir()
	n.rt, n.net = failOnceDelete{failed: new(bool)}, releaseNetwork{released: make(chan error, 2)}
	dir := n.secretsDir("r1")
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "API_KEY"), []byte("k"), 0o400); err != nil {
		t.Fatal(err)
	}
	if err := n.Remove(context.Background(), "r1"); err == nil {
		t.Fatal("remove: no error though the delete failed")
	}
	if _, err := os.Stat(dir); err != nil {
		t.Fatalf("the secrets of a replica not deleted went: %v", err)
	}
	if err := n.Remove(context.Background(), "r1"); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(dir); !os.IsNotExist(err) {
		t.Fatalf("the secrets folder stays after the replica was deleted: %v", err)
	}
}

// TestLogWriterChargedToReplica runs a replica with its log writer
// (shoal-init log) and finds the writer in the replica's cgroup, in the
// memory, CPU and pids hierarchies, so that a flood of output costs the
// replica's limits; the replica's last line, written as it stops, is still
// in its log once the replica is removed.
func TestLogWriterChargedToReplica(t *testing.T) {
	h := newHost(t)
	init := filepath.Join(t.TempDir(), "shoal-init")
	if err := stubtest.Build(init); err != nil {
		t.Fatal(err)
	}
	o := h.o
	o.Init = init
	n, err := New(o)
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	id := newID(t)
	logPath := filepath.Join(h.dir, "lnt", id+".log")
	if err := os.MkdirAll(filepath.Dir(logPath), 0o700); err != nil {
		t.Fatal(err)
	}
	s := node.ReplicaSpec{ID: id, App: "lnt", Revision: 1, Digest: h.img.Digest, Log: logPath,
		Config: config(t, `["sh", "-c", "echo hello; trap 'echo bye; exit 0' TERM; while :; do sleep 0.1; done"]`)}
	if _, err := n.Start(ctx, s); err != nil {
		t.Fatalf("start: %v", err)
	}
	t.Cleanup(func() { n.Remove(context.Background(), id) })
	poll(t, "the replica's first line", func() error {
		if b, _ := os.ReadFile(logPath); !strings.Contains(string(b), "hello") {
			return fmt.Errorf("log %q", b)
		}
		return nil
	})
	writer := writerOf(t, logPath)
	if writer == 0 {
		t.Fatalf("no process writes %s", logPath)
	}
	paths := h.rt.CgroupPaths(id)
	dirs := map[string]string{"unified": paths.Unified}
	if !paths.V2 {
		dirs = map[string]string{}
		for _, c := range []string{"memory", "cpu", "pids"} {
			dirs[c] = paths.V1[c]
		}
	}
	for c, d := range dirs {
		if !treeHolds(d, writer) {
			b, _ := os.ReadFile(fmt.Sprintf("/proc/%d/cgroup", writer))
			t.Errorf("%s: the log writer (pid %d) is not in the replica's cgroup %s; it is in\n%s", c, writer, d, b)
		}
	}
	if err := n.Stop(ctx, id, 10*time.Second); err != nil {
		t.Fatalf("stop: %v", err)
	}
	if err := n.Remove(ctx, id); err != nil {
		t.Fatalf("remove: %v", err)
	}
	if b, _ := os.ReadFile(logPath); !strings.Contains(string(b), "bye") {
		t.Fatalf("log %q after the replica's removal; want its last line, bye", b)
	}
}

// writerOf is the pid of the process whose standard output is the file
// at path (0 if none).
func writerOf(t *testing.T, path string) int {
	t.Helper()
	entries, err := os.ReadDir("/proc")
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range entries {
		pid, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		if l, err := os.Readlink(fmt.Sprintf("/proc/%d/fd/1", pid)); err == nil && l == path {
			return pid
		}
	}
	return 0
}

// treeHolds reports whether pid is in the cgroup at dir or one below it.
func treeHolds(dir string, pid int) bool {
	found := false
	filepath.WalkDir(dir, func(p string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() || d.Name() != "cgroup.procs" {
			return nil
		}
		b, _ := os.ReadFile(p)
		for _, f := range strings.Fields(string(b)) {
			if f == strconv.Itoa(pid) {
				found = true
			}
		}
		return nil
	})
	return found
}
