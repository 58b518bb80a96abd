package serving

import (
	"context"
	"fmt"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strconv"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/shoal-run/shoal/internal/api/types"
	"github.com/shoal-run/shoal/internal/clock"
	"github.com/shoal-run/shoal/internal/errdefs"
	"github.com/shoal-run/shoal/internal/image"
	"github.com/shoal-run/shoal/internal/network"
	"github.com/shoal-run/shoal/internal/route"
	"github.com/shoal-run/shoal/internal/runtime"
	"github.com/shoal-run/shoal/internal/store"
)

// fakeRuntime stands in for runc in the controller's unit tests: its
// containers are records and channels. A container writes one line to its
// stdout when it starts; its writes are stamped with the fake clock.
type fakeRuntime struct {
	mu    sync.Mutex
	ctrs  map[string]*fakeCtr
	pid   int
	clock clock.Clock
	// hook, if set, runs a merge hook container's command: it is called
	// when the container starts, and the container exits with its code.
	hook func(s runtime.Spec) int
}

type fakeCtr struct {
	spec   runtime.Spec
	pid    int
	frozen bool
	cpu    float64
	// cpuUpdates are the quotas UpdateCPU set, in order.
	cpuUpdates []float64
	// periods and throttled are the cgroup's CFS counters (cpu.stat).
	periods, throttled uint64
	done               chan struct{}
	// sick makes its health command exit 1; execs counts the commands run.
	sick   bool
	execs  int
	exit   runtime.ExitStatus
	stdout string // the path of its stdout
}

func newFakeRuntime(c clock.Clock) *fakeRuntime {
	return &fakeRuntime{ctrs: map[string]*fakeCtr{}, pid: 1000, clock: c}
}

func (f *fakeRuntime) Run(ctx context.Context, s runtime.Spec) (*runtime.Container, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if err := ctx.Err(); err != nil {
		return nil, fmt.Errorf("container %q: %w", s.ID, err) // as runc, which is not started
	}
	if _, ok := f.ctrs[s.ID]; ok {
		return nil, fmt.Errorf("container %q: %w", s.ID, errdefs.ErrConflict)
	}
	f.pid++
	c := &fakeCtr{spec: s, pid: f.pid, cpu: s.Limits.CPUs, done: make(chan struct{})}
	f.ctrs[s.ID] = c
	if s.Stdout != nil {
		c.stdout = s.Stdout.Name()
		if err := f.stamp(c.stdout, func() error { _, err := fmt.Fprintf(s.Stdout, "%s started\n", s.ID); return err }); err != nil {
			return nil, err
		}
	}
	if s.Labels[labelKind] == kindMerge && f.hook != nil {
		c.exit = runtime.ExitStatus{Code: f.hook(s), Known: true}
		close(c.done)
	}
	return &runtime.Container{ID: s.ID, Pid: f.pid, Status: runtime.StatusRunning}, nil
}

// stamp runs write and sets the file's times to the fake clock's.
func (f *fakeRuntime) stamp(path string, write func() error) error {
	if err := write(); err != nil {
		return err
	}
	now := f.clock.Now()
	return os.Chtimes(path, now, now)
}

// write appends data to container id's stdout.
func (f *fakeRuntime) write(id string, data []byte) error {
	c, err := f.get(id)
	if err != nil {
		return err
	}
	return f.stamp(c.stdout, func() error {
		w, err := os.OpenFile(c.stdout, os.O_WRONLY|os.O_APPEND, 0)
		if err != nil {
			return err
		}
		_, err = w.Write(data)
		if cerr := w.Close(); err == nil {
			err = cerr
		}
		return err
	})
}

func (f *fakeRuntime) get(id string) (*fakeCtr, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	c := f.ctrs[id]
	if c == nil {
		return nil, fmt.Errorf("container %q: %w", id, errdefs.ErrNotFound)
	}
	return c, nil
}

func (f *fakeRuntime) Wait(ctx context.Context, id string) (runtime.ExitStatus, error) {
	c, err := f.get(id)
	if err != nil {
		return runtime.ExitStatus{}, err
	}
	select {
	case <-c.done:
		return c.exit, nil
	case <-ctx.Done():
		return runtime.ExitStatus{}, ctx.Err()
	}
}

// exit ends container id with code as if its process exited.
func (f *fakeRuntime) exit(id string, code int) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if c := f.ctrs[id]; c != nil {
		select {
		case <-c.done:
		default:
			c.exit = runtime.ExitStatus{Code: code, Known: true}
			close(c.done)
		}
	}
}

func (f *fakeRuntime) Stop(_ context.Context, id string, _ time.Duration) (runtime.ExitStatus, error) {
	if _, err := f.get(id); err != nil {
		return runtime.ExitStatus{}, err
	}
	f.exit(id, 128+int(syscall.SIGTERM))
	c, _ := f.get(id)
	return c.exit, nil
}

func (f *fakeRuntime) Delete(_ context.Context, id string) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.ctrs[id] == nil {
		return fmt.Errorf("container %q: %w", id, errdefs.ErrNotFound)
	}
	delete(f.ctrs, id)
	return nil
}

func (f *fakeRuntime) setFrozen(id string, v bool) error {
	c, err := f.get(id)
	if err != nil {
		return err
	}
	f.mu.Lock()
	c.frozen = v
	f.mu.Unlock()
	return nil
}

func (f *fakeRuntime) Freeze(id string) error { return f.setFrozen(id, true) }
func (f *fakeRuntime) Thaw(id string) error   { return f.setFrozen(id, false) }

func (f *fakeRuntime) UpdateCPU(id string, cpus float64) error {
	c, err := f.get(id)
	if err != nil {
		return err
	}
	f.mu.Lock()
	c.cpu = cpus
	c.cpuUpdates = append(c.cpuUpdates, cpus)
	f.mu.Unlock()
	return nil
}

// work adds CFS periods to container id's counters, throttled of them
// throttled.
func (f *fakeRuntime) work(id string, periods, throttled uint64) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if c := f.ctrs[id]; c != nil {
		c.periods += periods
		c.throttled += throttled
	}
}

// cpu returns container id's quota and the quotas UpdateCPU set.
func (f *fakeRuntime) cpu(id string) (float64, []float64) {
	f.mu.Lock()
	defer f.mu.Unlock()
	c := f.ctrs[id]
	if c == nil {
		return 0, nil
	}
	return c.cpu, append([]float64(nil), c.cpuUpdates...)
}

func (f *fakeRuntime) Stats(id string) (runtime.Stats, error) {
	c, err := f.get(id)
	if err != nil {
		return runtime.Stats{}, err
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	return runtime.Stats{MemoryBytes: 1 << 20, NrPeriods: c.periods, NrThrottled: c.throttled}, nil
}

func (f *fakeRuntime) Get(id string) (*runtime.Container, error) {
	c, err := f.get(id)
	if err != nil {
		return nil, err
	}
	st := runtime.StatusRunning
	if c.frozen {
		st = runtime.StatusPaused
	}
	return &runtime.Container{ID: id, Pid: c.pid, Status: st}, nil
}

// Exec runs a health command: it exits 1 with a line of output when the
// container is sick, else 0.
func (f *fakeRuntime) Exec(_ context.Context, id string, p runtime.ExecSpec) (runtime.ExitStatus, error) {
	c, err := f.get(id)
	if err != nil {
		return runtime.ExitStatus{}, err
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	c.execs++
	if c.sick {
		fmt.Fprintf(p.Stderr, "%s: no\n", p.Args[0])
		return runtime.ExitStatus{Code: 1, Known: true}, nil
	}
	return runtime.ExitStatus{Known: true}, nil
}

// setSick makes container id's health command fail, or pass again.
func (f *fakeRuntime) setSick(id string, v bool) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if c := f.ctrs[id]; c != nil {
		c.sick = v
	}
}

// execs is how many health commands ran in container id.
func (f *fakeRuntime) execs(id string) int {
	f.mu.Lock()
	defer f.mu.Unlock()
	if c := f.ctrs[id]; c != nil {
		return c.execs
	}
	return 0
}

// cpuset returns the CPUs container id was created pinned to.
func (f *fakeRuntime) cpuset(id string) string {
	f.mu.Lock()
	defer f.mu.Unlock()
	if c := f.ctrs[id]; c != nil {
		return c.spec.Limits.CPUSet
	}
	return ""
}

func (f *fakeRuntime) count() int {
	f.mu.Lock()
	defer f.mu.Unlock()
	return len(f.ctrs)
}

// fakeNet hands every replica the loopback address, where the test's HTTP
// server answers health checks.
type fakeNet struct{}

func (fakeNet) Acquire(_ context.Context, id string, _ network.Mode) (*network.Attachment, error) {
	return &network.Attachment{ID: id, IP: net.IPv4(127, 0, 0, 1)}, nil
}
func (fakeNet) Lookup(id string) (*network.Attachment, bool)       { return nil, false }
func (fakeNet) Release(context.Context, *network.Attachment) error { return nil }

type fakeImages struct{}

func (fakeImages) Get(_ context.Context, ref string) (image.Image, error) {
	if ref != "hello:1" && ref != "sha256:hello" {
		return image.Image{}, fmt.Errorf("image %q: %w", ref, errdefs.ErrNotFound)
	}
	img := image.Image{Ref: "hello:1", Digest: "sha256:hello", Layers: []string{"/nonexistent"}}
	img.Config.Entrypoint = []string{"/hello"}
	return img, nil
}

// fakeRouter records the routes it is given; its load is set by the test.
type fakeRouter struct {
	mu      sync.Mutex
	routes  map[string]route.Route
	history []route.Route // every route set, in order
	load    route.Load
}

func (r *fakeRouter) SetRoute(rt route.Route) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.routes[rt.App] = rt
	r.history = append(r.history, rt)
}

// route returns app's route.
func (r *fakeRouter) route(app string) route.Route {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.routes[app]
}

// since returns the routes set from the n-th on, and how many there are.
func (r *fakeRouter) since(n int) ([]route.Route, int) {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([]route.Route(nil), r.history[n:]...), len(r.history)
}

func (r *fakeRouter) RemoveRoute(app string) {
	r.mu.Lock()
	defer r.mu.Unlock()
	delete(r.routes, app)
}

func (r *fakeRouter) Load(string) route.Load {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.load
}

// WaitIdle returns when the test's load shows no request in flight to
// replica id, or when ctx ends.
func (r *fakeRouter) WaitIdle(ctx context.Context, id string) error {
	for {
		r.mu.Lock()
		busy := r.load.Endpoints[id].InFlight > 0
		r.mu.Unlock()
		if !busy {
			return nil
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("replica %s: %w", id, ctx.Err())
		case <-time.After(time.Millisecond):
		}
	}
}

// setLoad sets the load the router reports.
func (r *fakeRouter) setLoad(l route.Load) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.load = l
}

func (r *fakeRouter) endpoints(app string) []string {
	r.mu.Lock()
	defer r.mu.Unlock()
	var ids []string
	for _, e := range r.routes[app].Endpoints {
		ids = append(ids, e.ID)
	}
	return ids
}

// fakeEvents keeps the events it is given.
type fakeEvents struct {
	mu  sync.Mutex
	evs []types.Event
}

func (f *fakeEvents) Emit(_ context.Context, e types.Event) (types.Event, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.evs = append(f.evs, e)
	return e, nil
}

// of returns the events of kind so far.
func (f *fakeEvents) of(kind string) []types.Event {
	f.mu.Lock()
	defer f.mu.Unlock()
	var out []types.Event
	for _, e := range f.evs {
		if e.Kind == kind {
			out = append(out, e)
		}
	}
	return out
}

// harness is a Manager on fakes, a bolt store and a fake clock.
type harness struct {
	t     *testing.T
	m     *Manager
	rt    *fakeRuntime
	r     *fakeRouter
	ev    *fakeEvents
	reg   *prometheus.Registry
	clock *clock.Fake
	port  int
}

func newHarness(t *testing.T) *harness { return newHarnessFrozen(t, 1<<40) }

// newHarnessFrozen is newHarness with a frozen-memory budget.
func newHarnessFrozen(t *testing.T, frozen int64) *harness {
	t.Helper()
	return newHarnessWith(t, frozen, fakeNet{})
}

// newHarnessWith is newHarness with a frozen-memory budget and a network
// of the test's.
func newHarnessWith(t *testing.T, frozen int64, netw Network) *harness {
	t.Helper()
	return newHarnessPlaced(t, frozen, netw, nil)
}

// newHarnessPlaced is newHarnessWith with a placer (nil: none).
func newHarnessPlaced(t *testing.T, frozen int64, netw Network, placer Placer) *harness {
	t.Helper()
	return newHarnessOpts(t, func(o *Options) { o.FrozenMemory, o.Network, o.Placer = frozen, netw, placer })
}

// newHarnessOpts is newHarness with its Manager's options changed by opt.
func newHarnessOpts(t *testing.T, opt func(o *Options)) *harness {
	t.Helper()
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/fail" { // a health check that never passes
			w.WriteHeader(http.StatusInternalServerError)
		}
	}))
	t.Cleanup(srv.Close)
	_, p, _ := net.SplitHostPort(srv.Listener.Addr().String())
	port, _ := strconv.Atoi(p)
	st, err := store.OpenBolt(filepath.Join(t.TempDir(), "store.db"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { st.Close() })
	fc := clock.NewFake(time.Unix(1e9, 0))
	h := &harness{t: t, rt: newFakeRuntime(fc), r: &fakeRouter{routes: map[string]route.Route{}}, ev: &fakeEvents{},
		reg: prometheus.NewRegistry(), clock: fc, port: port}
	o := Options{Store: st, Runtime: h.rt, Images: fakeImages{}, Network: fakeNet{}, Router: h.r,
		Events: h.ev, Node: "n1", Dir: t.TempDir(), Clock: h.clock, FrozenMemory: 1 << 40, Registerer: h.reg}
	opt(&o)
	h.m, err = New(o)
	if err != nil {
		t.Fatal(err)
	}
	if err := h.m.Start(context.Background()); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(h.m.Close)
	return h
}

// deploy deploys app hello with the given [scale] lines, and optionally
// more tables after them.
func (h *harness) deploy(scale string, more ...string) {
	h.t.Helper()
	m := fmt.Sprintf("name = \"hello\"\nimage = \"hello:1\"\nport = %d\n[scale]\n%s\n", h.port, scale)
	for _, x := range more {
		m += x + "\n"
	}
	if _, err := h.m.Deploy(context.Background(), types.DeployRequest{Manifest: m}); err != nil {
		h.t.Fatalf("deploy: %v", err)
	}
}

// replicas returns the app's replicas by state.
func (h *harness) replicas() map[string][]string {
	a, err := h.m.Get(context.Background(), "hello")
	if err != nil {
		h.t.Fatal(err)
	}
	out := map[string][]string{}
	for _, r := range a.Replicas {
		out[r.State] = append(out[r.State], r.ID)
	}
	return out
}

// wait polls cond (without moving the clock) until it holds.
func (h *harness) wait(what string, cond func() bool) {
	h.t.Helper()
	for i := 0; i < 5000; i++ {
		if cond() {
			return
		}
		time.Sleep(time.Millisecond)
	}
	h.t.Fatalf("%s did not happen; replicas: %v", what, h.replicas())
}

// advance moves the fake clock and waits until the controller has done a
// reconcile round at the new time.
func (h *harness) advance(d time.Duration) {
	h.t.Helper()
	ctl := h.m.app("hello")
	h.clock.Advance(d)
	at := h.clock.Now().UnixNano()
	ctl.notify()
	h.wait("a reconcile round", func() bool { return ctl.roundAt.Load() >= at })
}

// advanceUntil moves the fake clock by step until cond holds, for work that
// other goroutines do on their own timers (at most 50 steps; after each it
// polls cond for a moment before it moves the clock again).
func (h *harness) advanceUntil(what string, step time.Duration, cond func() bool) {
	h.t.Helper()
	for i := 0; i < 50; i++ {
		h.advance(step)
		for j := 0; j < 20; j++ {
			if cond() {
				return
			}
			time.Sleep(time.Millisecond)
		}
	}
	h.t.Fatalf("%s did not happen in 50 steps of %s; replicas: %v", what, step, h.replicas())
}
