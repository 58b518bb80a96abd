package agent

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/shoal-run/shoal/internal/errdefs"
	"github.com/shoal-run/shoal/internal/httperr"
	"github.com/shoal-run/shoal/internal/manifest"
	"github.com/shoal-run/shoal/internal/node"
)

// fakeNode is a node.Node that records its calls; a replica it does
// not know is not found.
type fakeNode struct {
	mu      sync.Mutex
	calls   []string
	known   map[string]bool
	exit    chan node.ExitStatus // Wait returns what it gets
	waits   int
	checkOK bool
}

func newFakeNode() *fakeNode {
	return &fakeNode{known: map[string]bool{}, exit: make(chan node.ExitStatus, 1)}
}

func (f *fakeNode) call(format string, args ...any) {
	f.mu.Lock()
	f.calls = append(f.calls, fmt.Sprintf(format, args...))
	f.mu.Unlock()
}

func (f *fakeNode) has(id string) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	if !f.known[id] {
		return fmt.Errorf("replica %q: %w", id, errdefs.ErrNotFound)
	}
	return nil
}

func (f *fakeNode) Start(ctx context.Context, s node.ReplicaSpec) (node.Started, error) {
	f.call("start %s %s %s port=%d env=%v mounts=%d", s.ID, s.App, s.Digest, s.Config.Port, s.Env, len(s.Mounts))
	if s.Config.Port == 0 {
		return node.Started{}, errdefs.Invalid("config.port", "0 is not a port")
	}
	f.mu.Lock()
	f.known[s.ID] = true
	f.mu.Unlock()
	return node.Started{Addr: "10.77.0.5:8080", Pid: 4242, CPUSet: "1"}, nil
}
func (f *fakeNode) Freeze(_ context.Context, id string) (int64, error) {
	f.call("freeze %s", id)
	return 1 << 20, f.has(id)
}
func (f *fakeNode) Thaw(_ context.Context, id string) error { f.call("thaw %s", id); return f.has(id) }
func (f *fakeNode) Drain(ctx context.Context, id string, grace time.Duration) error {
	f.call("drain %s %s", id, grace)
	return f.has(id)
}
func (f *fakeNode) Stop(ctx context.Context, id string, grace time.Duration) error {
	f.call("stop %s %s", id, grace)
	return f.has(id)
}
func (f *fakeNode) Wait(ctx context.Context, id string) (node.ExitStatus, error) {
	f.mu.Lock()
	f.waits++
	f.mu.Unlock()
	if err := f.has(id); err != nil {
		return node.ExitStatus{}, err
	}
	select {
	case st := <-f.exit:
		return st, nil
	case <-ctx.Done():
		return node.ExitStatus{}, ctx.Err()
	}
}
func (f *fakeNode) Check(ctx context.Context, id, addr string, h manifest.Health) error {
	f.call("check %s %s %s", id, addr, h.HTTP)
	if !f.checkOK {
		return errors.New("GET /healthz: 500")
	}
	return f.has(id)
}
func (f *fakeNode) Usage(_ context.Context, id string) (node.CPUUse, error) {
	return node.CPUUse{Periods: 100, Throttled: 7, Used: 3 * time.Second, Stalled: 250 * time.Millisecond, Pressure: true}, f.has(id)
}
func (f *fakeNode) SetCPU(_ context.Context, id string, cpus float64) error {
	f.call("cpu %s %g", id, cpus)
	return f.has(id)
}
func (f *fakeNode) Remove(ctx context.Context, id string) error {
	f.call("remove %s", id)
	f.mu.Lock()
	defer f.mu.Unlock()
	delete(f.known, id)
	return nil
}
func (f *fakeNode) Adopt(_ context.Context, k node.Known) (node.Adopted, error) {
	f.call("adopt %s %s %s", k.ID, k.App, k.CPUSet)
	if f.has(k.ID) != nil {
		return node.Adopted{}, nil
	}
	return node.Adopted{Running: true, Frozen: true, Pid: 77}, nil
}
func (f *fakeNode) Release(_ context.Context, id string) error { f.call("release %s", id); return nil }

func (f *fakeNode) log() []string {
	f.mu.Lock()
	defer f.mu.Unlock()
	return append([]string(nil), f.calls...)
}

// remoteOf serves fake as node n2's agent on loopback and returns the
// Remote that reaches it.
func remoteOf(t *testing.T, fake node.Node, poll time.Duration) *Remote {
	t.Helper()
	st := testStore(t)
	srv := serve(t, (&Server{Name: "n2", Secret: testSecret, Node: fake, WaitPoll: poll, Log: testLog(t)}).Handler())
	addNode(t, st, "n2", srv)
	return NewClient(st, testSecret).Remote("n2")
}

// Every node.Node call made on a Remote is made on the other node's
// own Node with the same arguments, and its results come back.
func TestRemoteCallsTheNode(t *testing.T) {
	ctx := context.Background()
	fake := newFakeNode()
	fake.checkOK = true
	r := remoteOf(t, fake, 0)
	spec := node.ReplicaSpec{ID: "web-1", App: "web", Revision: 3, Digest: "sha256:abc",
		Config: manifest.Config{Port: 8080, Health: manifest.Health{HTTP: "/healthz", Interval: manifest.Duration{Duration: time.Second}}},
		Env:    []string{"A=1"}, Mounts: []node.Mount{{Source: "/v", Destination: "/data"}}}
	st, err := r.Start(ctx, spec)
	if err != nil || st != (node.Started{Addr: "10.77.0.5:8080", Pid: 4242, CPUSet: "1", Node: "n2"}) {
		t.Fatalf("start: %+v, %v", st, err)
	}
	if mem, err := r.Freeze(ctx, "web-1"); err != nil || mem != 1<<20 {
		t.Fatalf("freeze: %d, %v", mem, err)
	}
	if err := r.Thaw(ctx, "web-1"); err != nil {
		t.Fatal(err)
	}
	if err := r.Check(ctx, "web-1", "10.77.0.5:8080", spec.Config.Health); err != nil {
		t.Fatal(err)
	}
	if u, err := r.Usage(ctx, "web-1"); err != nil || u != (node.CPUUse{Periods: 100, Throttled: 7, Used: 3 * time.Second, Stalled: 250 * time.Millisecond, Pressure: true}) {
		t.Fatalf("usage: %+v %v", u, err)
	}
	if err := r.SetCPU(ctx, "web-1", 1.5); err != nil {
		t.Fatal(err)
	}
	if err := r.Drain(ctx, "web-1", 3*time.Second); err != nil {
		t.Fatal(err)
	}
	if err := r.Stop(ctx, "web-1", 2*time.Second); err != nil {
		t.Fatal(err)
	}
	if a, err := r.Adopt(ctx, node.Known{ID: "web-1", App: "web", CPUSet: "1"}); err != nil || a != (node.Adopted{Running: true, Frozen: true, Pid: 77}) {
		t.Fatalf("adopt: %+v, %v", a, err)
	}
	if err := r.Release(ctx, "web-1"); err != nil {
		t.Fatal(err)
	}
	if err := r.Remove(ctx, "web-1"); err != nil {
		t.Fatal(err)
	}
	want := []string{
		"start web-1 web sha256:abc port=8080 env=[A=1] mounts=1",
		"freeze web-1", "thaw web-1", "check web-1 10.77.0.5:8080 /healthz", "cpu web-1 1.5",
		"drain web-1 3s", "stop web-1 2s", "adopt web-1 web 1", "release web-1", "remove web-1",
	}
	if got := fake.log(); fmt.Sprint(got) != fmt.Sprint(want) {
		t.Fatalf("calls on the node:\n got %q\nwant %q", got, want)
	}
}

// Errors keep their kind: an unknown replica stays not found, a bad spec
// invalid with its field, a failed check an error; a replica the node
// does not know is adopted as not running.
func TestRemoteErrorKinds(t *testing.T) {
	ctx := context.Background()
	r := remoteOf(t, newFakeNode(), 0)
	for name, err := range map[string]error{
		"thaw":   r.Thaw(ctx, "nope"),
		"stop":   r.Stop(ctx, "nope", 0),
		"drain":  r.Drain(ctx, "nope", time.Second),
		"setcpu": r.SetCPU(ctx, "nope", 1),
	} {
		if !errdefs.IsNotFound(err) {
			t.Errorf("%s of an unknown replica: %v; want not found", name, err)
		}
	}
	if _, err := r.Freeze(ctx, "nope"); !errdefs.IsNotFound(err) {
		t.Errorf("freeze: %v", err)
	}
	if _, err := r.Usage(ctx, "nope"); !errdefs.IsNotFound(err) {
		t.Errorf("usage: %v", err)
	}
	if _, err := r.Wait(ctx, "nope"); !errdefs.IsNotFound(err) {
		t.Errorf("wait: %v", err)
	}
	if _, err := r.Start(ctx, node.ReplicaSpec{ID: "x", App: "web"}); errdefs.Field(err) != "config.port" {
		t.Errorf("start with a bad spec: %v; want invalid config.port", err)
	}
	if err := r.Check(ctx, "nope", "a:1", manifest.Health{}); err == nil || errdefs.IsNotFound(err) {
		t.Errorf("failed check: %v; want the check's error", err)
	}
	if a, err := r.Adopt(ctx, node.Known{ID: "nope"}); err != nil || a.Running {
		t.Errorf("adopt of an unknown replica: %+v, %v; want not running, no error", a, err)
	}
}

// Wait is a long poll: the node answers "still running" each poll, the
// Remote asks again, and the exit comes back when it happens; a Wait whose
// context ends returns.
func TestRemoteWaitLongPoll(t *testing.T) {
	ctx := context.Background()
	fake := newFakeNode()
	fake.known["web-1"] = true
	r := remoteOf(t, fake, 5*time.Millisecond)
	done := make(chan error, 1)
	var got node.ExitStatus
	go func() {
		var err error
		got, err = r.Wait(ctx, "web-1")
		done <- err
	}()
	// Let several polls pass before the exit.
	for {
		fake.mu.Lock()
		n := fake.waits
		fake.mu.Unlock()
		if n >= 3 {
			break
		}
		time.Sleep(time.Millisecond)
	}
	select {
	case err := <-done:
		t.Fatalf("wait returned before the exit: %v", err)
	default:
	}
	fake.exit <- node.ExitStatus{Code: 137, Signal: syscall.SIGKILL, OOMKilled: true, Known: true}
	if err := <-done; err != nil || got != (node.ExitStatus{Code: 137, Signal: syscall.SIGKILL, OOMKilled: true, Known: true}) {
		t.Fatalf("wait: %+v, %v", got, err)
	}
	cctx, cancel := context.WithCancel(ctx)
	go func() { _, err := r.Wait(cctx, "web-1"); done <- err }()
	cancel()
	if err := <-done; !errors.Is(err, context.Canceled) {
		t.Fatalf("cancelled wait: %v", err)
	}
}

// A node that runs no replicas yet answers unavailable; a node that is
// gone is unavailable, Adopt's answer too, with nothing running.
func TestRemoteNodeUnavailable(t *testing.T) {
	ctx := context.Background()
	st := testStore(t)
	srv := serve(t, (&Server{Name: "n2", Secret: testSecret}).Handler())
	addNode(t, st, "n2", srv)
	r := NewClient(st, testSecret).Remote("n2")
	if err := r.Thaw(ctx, "web-1"); !errors.Is(err, errdefs.ErrUnavailable) {
		t.Fatalf("node without replicas: %v", err)
	}
	srv.Close()
	if _, err := r.Start(ctx, node.ReplicaSpec{ID: "web-1"}); !errors.Is(err, errdefs.ErrUnavailable) {
		t.Fatalf("node gone: %v", err)
	}
	if a, err := r.Adopt(ctx, node.Known{ID: "web-1"}); !errors.Is(err, errdefs.ErrUnavailable) || a.Running {
		t.Fatalf("adopt on a node gone: %+v, %v; want unavailable", a, err)
	}
}

// Adopt asks again a node that answers unavailable (a daemon restarting
// under a live lease) before it reports the node unavailable.
func TestRemoteAdoptAsksAgain(t *testing.T) {
	ctx := context.Background()
	st := testStore(t)
	fake := newFakeNode()
	fake.known["web-1"] = true
	h := (&Server{Name: "n2", Secret: testSecret, Node: fake}).Handler()
	var mu sync.Mutex
	refuse := adoptTries - 1
	srv := serve(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		mu.Lock()
		busy := refuse > 0
		refuse--
		mu.Unlock()
		if busy {
			httperr.WriteErr(w, fmt.Errorf("starting: %w", errdefs.ErrUnavailable))
			return
		}
		h.ServeHTTP(w, r)
	}))
	addNode(t, st, "n2", srv)
	r := NewClient(st, testSecret).Remote("n2")
	if a, err := r.Adopt(ctx, node.Known{ID: "web-1"}); err != nil || !a.Running || a.Pid != 77 {
		t.Fatalf("adopt after %d refusals: %+v, %v", adoptTries-1, a, err)
	}
	mu.Lock()
	refuse = adoptTries
	mu.Unlock()
	if a, err := r.Adopt(ctx, node.Known{ID: "web-1"}); !errors.Is(err, errdefs.ErrUnavailable) || a.Running {
		t.Fatalf("adopt refused %d times: %+v, %v; want unavailable, not running", adoptTries, a, err)
	}
}
