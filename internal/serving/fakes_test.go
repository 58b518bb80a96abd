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
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/shoal-run/shoal/internal/api/types"
	"github.com/shoal-run/shoal/internal/clock"
	"github.com/shoal-run/shoal/internal/dispatch"
	"github.com/shoal-run/shoal/internal/errdefs"
	"github.com/shoal-run/shoal/internal/image"
	"github.com/shoal-run/shoal/internal/localnode"
	"github.com/shoal-run/shoal/internal/network"
	"github.com/shoal-run/shoal/internal/route"
	"github.com/shoal-run/shoal/internal/store"
)

// fakeNet hands every replica the loopback address, where the test's HTTP
// server answers health checks.
type fakeNet struct{}

func (fakeNet) Acquire(_ context.Context, id string, _ network.Mode) (*network.Attachment, error) {
	return &network.Attachment{ID: id, IP: net.IPv4(127, 0, 0, 1)}, nil
}
func (fakeNet) Lookup(id string) (*network.Attachment, bool) {
	return &network.Attachment{ID: id, IP: net.IPv4(127, 0, 0, 1)}, true
}
func (fakeNet) Release(context.Context, *network.Attachment) error  { return nil }
func (fakeNet) SetPolicy(*network.Attachment, network.Policy) error { return nil }

type fakeImages struct{}

// emptyLayer is the fake image's one layer, an empty folder: a volume is
// made from the image's layers.
var emptyLayer = sync.OnceValue(func() string {
	d := filepath.Join(os.TempDir(), "shoal-serving-test-layer")
	if err := os.MkdirAll(d, 0o755); err != nil {
		panic(err)
	}
	return d
})

func (fakeImages) Get(_ context.Context, ref string) (image.Image, error) {
	if ref != "hello:1" && ref != "sha256:hello" {
		return image.Image{}, fmt.Errorf("image %q: %w", ref, errdefs.ErrNotFound)
	}
	img := image.Image{Ref: "hello:1", Digest: "sha256:hello", Layers: []string{emptyLayer()}}
	img.Config.Entrypoint = []string{"/hello"}
	return img, nil
}

// fakeRouter records the routes it is given; its load is set by the test.
type fakeRouter struct {
	// gate, when set, is called with each route before it is set, outside
	// mu: a test holds a publish there.
	gate    atomic.Pointer[func(route.Route)]
	mu      sync.Mutex
	routes  map[string]route.Route
	history []route.Route // every route set, in order
	load    route.Load
	waited  map[string]int // WaitIdle calls by endpoint
}

func (r *fakeRouter) SetRoute(rt route.Route) {
	if g := r.gate.Load(); g != nil {
		(*g)(rt)
	}
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
	r.mu.Lock()
	if r.waited == nil {
		r.waited = map[string]int{}
	}
	r.waited[id]++
	r.mu.Unlock()
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

// waits counts the WaitIdle calls for endpoint id so far.
func (r *fakeRouter) waits(id string) int {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.waited[id]
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

// recorded waits until every event the manager has emitted so far is in
// the event log. Events are recorded in the background, in order: a mark
// emitted now is recorded after all of them.
func (h *harness) recorded() {
	h.t.Helper()
	n := len(h.ev.of("test-mark"))
	h.m.emit("test-mark", "", "", "", nil)
	h.wait("the events emitted so far are recorded", func() bool { return len(h.ev.of("test-mark")) > n })
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
	// held makes the health check "/held" fail while it is set;
	// heldProbes counts the checks of "/held".
	held       *atomic.Bool
	heldProbes *atomic.Int64
	// netw and placer are its local node's.
	netw   localnode.Network
	placer localnode.Placer
	// remote reaches the other nodes of a cluster (nil: a single host).
	remote func(node string) Node
	// lrt is the runtime its local node runs on (rt, or a wrapper).
	lrt localnode.Runtime
	// secrets is its local node's SecretsDir ("": none).
	secrets string
	// wrapLocal, if set, wraps its local node.
	wrapLocal func(h *harness, n *localnode.Node) Node
	// init is its local node's shoal-init ("": none).
	init string
}

// testOpts are a harness Manager's options and its local node's.
type testOpts struct {
	Options
	Network localnode.Network
	Placer  localnode.Placer
	// Remote reaches the other nodes of a cluster (with Cluster).
	Remote func(node string) Node
	// Runtime is the local node's; SecretsDir its replicas' secrets
	// ("": none).
	Runtime    localnode.Runtime
	SecretsDir string
	// WrapLocal, if set, wraps the local node (checkpoint_test.go).
	WrapLocal func(h *harness, n *localnode.Node) Node
	// Init is the local node's shoal-init ("": none; the fake runtime
	// runs no file).
	Init string
}

// withLocal returns o with a local node (also its hook runner) on o's
// images, router, clock and folder, and on the harness's runtime, network
// and placer; in a cluster, with a dispatcher over it and the harness's
// other nodes.
func (h *harness) withLocal(o Options) Options {
	h.t.Helper()
	n, err := localnode.New(localnode.Options{Runtime: h.lrt, Images: o.Images, Network: h.netw, Router: o.Router,
		Placer: h.placer, Dir: o.Dir, Clock: o.Clock, Logger: o.Logger, SecretsDir: h.secrets, Init: h.init})
	if err != nil {
		h.t.Fatal(err)
	}
	o.Local, o.Hooks = n, n
	if h.wrapLocal != nil {
		o.Local = h.wrapLocal(h, n)
	}
	if h.remote != nil {
		o.Dispatcher = dispatch.New(dispatch.Options{Self: o.Node, Local: n, Remote: h.remote, Dir: o.Dir,
			Clock: o.Clock, Logger: o.Logger})
	}
	return o
}

func newHarness(t *testing.T) *harness { return newHarnessFrozen(t, 1<<40) }

// newHarnessFrozen is newHarness with a frozen-memory budget.
func newHarnessFrozen(t *testing.T, frozen int64) *harness {
	t.Helper()
	return newHarnessWith(t, frozen, fakeNet{})
}

// newHarnessWith is newHarness with a frozen-memory budget and a network
// of the test's.
func newHarnessWith(t *testing.T, frozen int64, netw localnode.Network) *harness {
	t.Helper()
	return newHarnessPlaced(t, frozen, netw, nil)
}

// newHarnessPlaced is newHarnessWith with a placer (nil: none).
func newHarnessPlaced(t *testing.T, frozen int64, netw localnode.Network, placer localnode.Placer) *harness {
	t.Helper()
	return newHarnessOpts(t, func(o *testOpts) { o.FrozenMemory, o.Network, o.Placer = frozen, netw, placer })
}

// newHarnessOpts is newHarness with its Manager's options changed by opt.
func newHarnessOpts(t *testing.T, opt func(o *testOpts)) *harness {
	t.Helper()
	held, heldProbes := new(atomic.Bool), new(atomic.Int64)
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/held" {
			heldProbes.Add(1)
		}
		if r.URL.Path == "/fail" || (r.URL.Path == "/held" && held.Load()) { // a health check that does not pass
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
		reg: prometheus.NewRegistry(), clock: fc, port: port, held: held, heldProbes: heldProbes}
	o := testOpts{Options: Options{Store: st, Images: fakeImages{}, Router: h.r,
		Events: h.ev, Node: "n1", Dir: t.TempDir(), Clock: h.clock, FrozenMemory: 1 << 40, Registerer: h.reg},
		Network: fakeNet{}, Runtime: h.rt}
	opt(&o)
	h.netw, h.placer, h.remote, h.lrt, h.secrets, h.wrapLocal = o.Network, o.Placer, o.Remote, o.Runtime, o.SecretsDir, o.WrapLocal
	h.init = o.Init
	h.m, err = New(h.withLocal(o.Options))
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
func (h *harness) replicas() map[State][]string {
	a, err := h.m.Get(context.Background(), "hello")
	if err != nil {
		h.t.Fatal(err)
	}
	out := map[State][]string{}
	for _, r := range a.Replicas {
		out[State(r.State)] = append(out[State(r.State)], r.ID)
	}
	return out
}

// wait polls cond (without moving the clock) until it holds.
func (h *harness) wait(what string, cond func() bool) {
	h.t.Helper()
	for deadline := time.Now().Add(60 * time.Second); time.Now().Before(deadline); {
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
