package serving

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/shoal-run/shoal/internal/api/types"
	"github.com/shoal-run/shoal/internal/clock"
	"github.com/shoal-run/shoal/internal/errdefs"
	"github.com/shoal-run/shoal/internal/group"
	"github.com/shoal-run/shoal/internal/image"
	"github.com/shoal-run/shoal/internal/route"
	"github.com/shoal-run/shoal/internal/store"
)

// Images resolves an app's image.
type Images interface {
	Get(ctx context.Context, ref string) (image.Image, error)
}

// Router is the proxy's side of serving: it routes to ready replicas and
// reports their load. A replica left out of a SetRoute gets no new request
// once SetRoute returns; WaitIdle returns when its last request is done.
type Router interface {
	SetRoute(r route.Route)
	RemoveRoute(app string)
	Load(app string) route.Load
	WaitIdle(ctx context.Context, endpointID string) error
}

// EventLog records what serving decides and why.
type EventLog interface {
	Emit(ctx context.Context, e types.Event) (types.Event, error)
}

// Options configure a Manager.
type Options struct {
	Store store.Store
	// Hooks runs the apps' merge hooks on this host (localnode's Node).
	Hooks  HookRunner
	Images Images
	Router Router
	Events EventLog
	// Local is this host's Node (localnode): where a single host's
	// replicas run, and this node's part of a cluster.
	Local Node
	// Cluster, when set, makes this Manager a node of a cluster: it runs
	// the apps only while the node leads (the cluster's Hub establishes
	// and revokes it, a cluster.LeaderWork), and places their replicas on
	// the cluster's live nodes through Dispatcher. Nil: a single host.
	Cluster Cluster
	// Dispatcher is the cluster's nodes as one Node, over Local and the
	// other nodes' agents (dispatch.Dispatcher); cluster only.
	Dispatcher Dispatcher
	// Node is this host's name; replicas are recorded under it.
	Node string
	// Dir holds each app's volumes and replica logs: <Dir>/<app>/...
	Dir string
	// ProxyAddr is where the proxy listens, for apps' URLs.
	ProxyAddr string
	// TCPPorts are the ports a TCP app may listen on (the daemon's
	// --proxy-tcp-ports; zero: route.DefaultTCPPorts), and OwnPorts the
	// daemon's own listening ports, by the flag that set each, which no
	// app may take.
	TCPPorts route.PortRange
	OwnPorts map[int]string
	// SelfURL is where replicas reach the self API (http://gateway:port),
	// given to them as $SHOAL_API_URL with a token of their own as
	// $SHOAL_TOKEN; "" gives them neither.
	SelfURL string
	// FrozenMemory is the per-host budget for the memory of frozen replicas;
	// above it the least recently used are stopped. 0: a quarter of RAM.
	FrozenMemory int64
	// Premade is how many apps at zero replicas keep their next replica
	// made ahead (premade.go), the most recently used first, while the
	// memory those hold stays within PremadeMemory (0: no bound); 0: none.
	// Only on a single host whose Local is a node.Premaker.
	Premade       int
	PremadeMemory int64
	// Confiner, if set, is given back each deleted app's host ids (the
	// node runs the app's containers in a user namespace of its own).
	Confiner   Confiner
	Clock      clock.Clock
	Logger     *slog.Logger
	Registerer prometheus.Registerer
}

// Manager runs every app of this node. It implements api.Apps, and the
// proxy's activator through Activate.
type Manager struct {
	o       Options
	node    Node       // where the apps' replicas run: this host, or the cluster's nodes
	local   Node       // this host
	disp    Dispatcher // the cluster's nodes; nil on a single host
	log     *slog.Logger
	clock   clock.Clock
	metrics *metrics
	ctx     context.Context
	// budgetMu runs one enforceFrozenBudget at a time.
	budgetMu sync.Mutex
	cancel   context.CancelFunc

	mu   sync.Mutex
	apps map[string]*appCtl
	lead *lead // the apps run under it; nil while a node of a cluster follows
	// wakes are the wake-ups of apps without a controller yet (wakes.go).
	wakes map[string]time.Time
	// leader is the leader work of this node's term in a cluster.
	leader  *leading
	changed <-chan struct{} // the cluster's live nodes changed
	wg      group.Group
	eventQueue
	self  tokenIndex
	quiet quietApps
	// starts admits this host's replica starts (admit.go); nil in a
	// cluster, whose nodes start their own.
	starts *admission
	// premades is the budget of the pre-made tier (premade.go).
	premades premadeBudget
}

// New returns a Manager; Start loads the apps in the store.
func New(o Options) (*Manager, error) {
	if o.Store == nil || o.Hooks == nil || o.Images == nil || o.Local == nil || o.Router == nil {
		return nil, errors.New("serving: store, hook runner, images, local node and router are required")
	}
	if o.Cluster != nil && o.Dispatcher == nil {
		return nil, errors.New("serving: a node of a cluster needs a dispatcher over its nodes")
	}
	if o.Dir == "" || !filepath.IsAbs(o.Dir) {
		return nil, errdefs.Invalid("dir", "%q is not an absolute path", o.Dir)
	}
	if o.Clock == nil {
		o.Clock = clock.Real{}
	}
	if o.Logger == nil {
		o.Logger = slog.New(slog.DiscardHandler)
	}
	if o.Node == "" {
		o.Node, _ = os.Hostname()
	}
	if o.FrozenMemory == 0 {
		o.FrozenMemory = MemTotal() / 4
	}
	m := &Manager{o: o, log: o.Logger, clock: o.Clock, apps: map[string]*appCtl{},
		eventQueue: eventQueue{log: o.Logger, events: o.Events, q: make(chan types.Event, 4096), clock: o.Clock}}
	m.local = o.Local
	m.node = m.local
	if o.Cluster != nil {
		m.disp = o.Dispatcher
		m.node = m.disp
		m.changed = o.Cluster.Changed()
	}
	if m.disp == nil {
		m.starts = newAdmission(o.Clock)
	}
	m.ctx, m.cancel = context.WithCancel(context.Background())
	m.metrics = newMetrics(m, o.Registerer)
	if o.Events != nil {
		m.wg.Add(1)
		go func() { defer m.wg.Done(); m.record(m.ctx) }()
	}
	return m, nil
}

// Start loads every app from the store, adopts the replicas this node left
// running and starts a controller per app. A node of a cluster does so only
// while it leads: Start returns at once, and the apps are loaded when the
// cluster's Hub establishes the Manager under a term.
func (m *Manager) Start(ctx context.Context) error {
	if err := os.MkdirAll(m.o.Dir, 0o700); err != nil {
		return fmt.Errorf("serving: %w", err)
	}
	if m.o.Cluster != nil {
		return nil
	}
	l := m.newLead(m.ctx, nil)
	m.lead = l
	if err := m.load(ctx, l); err != nil {
		return err
	}
	return nil
}

func (m *Manager) run(ctl *appCtl) {
	wg := &ctl.lead.wg
	wg.Add(3)
	go func() { defer wg.Done(); ctl.loop() }()
	go func() { defer wg.Done(); ctl.writer() }()
	ctl.merge.wg.Add(1)
	go func() { defer wg.Done(); ctl.merge.loop(ctl.ctx(), ctl.stop) }()
}

// Close stops the controllers. Replicas keep running: the next daemon
// adopts them.
func (m *Manager) Close() {
	m.cancel()
	m.Revoke()
	m.mu.Lock()
	l := m.lead
	ctls := make([]*appCtl, 0, len(m.apps))
	for _, ctl := range m.apps {
		ctl.close()
		ctls = append(ctls, ctl)
	}
	m.mu.Unlock()
	if l != nil {
		l.wg.Wait()
	}
	m.wg.Wait()
	// Premade replicas are not adopted: removed now.
	var wg sync.WaitGroup
	for _, ctl := range ctls {
		wg.Add(1)
		go func() { defer wg.Done(); ctl.closePremade() }()
	}
	wg.Wait()
}

// Activate wakes app: the proxy calls it when a request finds no ready
// replica. It never blocks. A wake-up of an app not loaded yet is kept for
// its controller (wakes.go).
func (m *Manager) Activate(app string) {
	m.mu.Lock()
	ctl := m.apps[app]
	if ctl == nil {
		m.keepWake(app)
	}
	m.mu.Unlock()
	if ctl != nil {
		ctl.activate(m.clock.Now())
	}
}

// Owns reports whether replica id belongs to one of this node's apps.
// A replica container nobody owns after Start lost its record.
func (m *Manager) Owns(id string) bool {
	m.mu.Lock()
	ctls := make([]*appCtl, 0, len(m.apps))
	for _, ctl := range m.apps {
		ctls = append(ctls, ctl)
	}
	m.mu.Unlock()
	for _, ctl := range ctls {
		if ctl.has(id) {
			return true
		}
	}
	return false
}

func (m *Manager) app(name string) *appCtl {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.apps[name]
}

// eventQueue records serving's events in the background, in order: a
// failure to record is logged, never fatal, and never holds up the
// caller.
type eventQueue struct {
	log    *slog.Logger
	events EventLog // nil: none are recorded
	q      chan types.Event
	clock  clock.Clock // for the events' limit by app (eventlimit.go)

	limitMu sync.Mutex
	byApp   map[string]*appEvents
}

// emit logs an event and queues it.
func (x *eventQueue) emit(kind, app, replica, reason string, inputs map[string]float64) {
	x.log.Info("serving: "+kind, "app", app, "replica", replica, "reason", reason)
	x.queueEvent(types.Event{Kind: kind, App: app, Replica: replica, Reason: reason, Inputs: inputs})
}

// queueEvent hands e to record; when the queue is full the event is
// dropped, with a warning.
func (x *eventQueue) queueEvent(e types.Event) {
	if x.events == nil || !x.limit(e) {
		return
	}
	x.send(e)
}

// send hands e to record, or drops it with a warning when the queue is
// full.
func (x *eventQueue) send(e types.Event) {
	select {
	case x.q <- e:
	default:
		x.log.Warn("serving: event log is behind; event dropped", "kind", e.Kind, "app", e.App)
	}
}

// record writes queued events to the event log until ctx ends, and then
// those still queued.
func (x *eventQueue) record(ctx context.Context) {
	for {
		select {
		case e := <-x.q:
			if _, err := x.events.Emit(context.Background(), e); err != nil {
				x.log.Warn("serving: record event", "kind", e.Kind, "app", e.App, "err", err)
			}
		case <-ctx.Done():
			for {
				select {
				case e := <-x.q:
					x.events.Emit(context.Background(), e)
				default:
					return
				}
			}
		}
	}
}

func (m *Manager) appDir(app string) string { return filepath.Join(m.o.Dir, app) }

// MemTotal is the host's RAM in bytes (0 if unknown).
func MemTotal() int64 {
	b, err := os.ReadFile("/proc/meminfo")
	if err != nil {
		return 0
	}
	var kb int64
	fmt.Sscanf(string(b), "MemTotal: %d kB", &kb)
	return kb * 1024
}

// LocalNode is this host's Node, which the leader of a cluster drives
// through the node's agent.
func (m *Manager) LocalNode() Node { return m.local }
