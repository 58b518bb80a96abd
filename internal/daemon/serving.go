package daemon

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"os/exec"
	"path/filepath"
	"strings"
	"sync/atomic"
	"time"

	"github.com/shoal-run/shoal/internal/appapi"
	"github.com/shoal-run/shoal/internal/clock"
	"github.com/shoal-run/shoal/internal/events"
	"github.com/shoal-run/shoal/internal/placement"
	"github.com/shoal-run/shoal/internal/proxy"
	"github.com/shoal-run/shoal/internal/runtime"
	"github.com/shoal-run/shoal/internal/serving"
	"github.com/shoal-run/shoal/internal/units"
)

// eventsKept is how many events the event log keeps.
const eventsKept = 10000

// openServing starts the event log, the proxy and the app manager, which
// adopts the replicas a previous daemon left running.
func (d *Daemon) openServing(ctx context.Context) error {
	cfg := d.cfg
	d.events = events.New(d.store, clock.Real{}, eventsKept)
	act := &activator{}
	d.proxy = proxy.New(proxy.Options{Activator: act, Domain: cfg.Domain, Registerer: d.reg, Logger: d.log})
	var frozen int64
	if cfg.FrozenMemory != "" {
		frozen, _ = units.ParseBytes(cfg.FrozenMemory) // validated
	}
	if cfg.Proxy != "off" {
		l, err := net.Listen("tcp", cfg.Proxy)
		if err != nil {
			return fmt.Errorf("--proxy %s: %w", cfg.Proxy, err)
		}
		d.proxyAddr = l.Addr().String()
		go func() {
			if err := d.proxy.Serve(l); err != nil && !errors.Is(err, http.ErrServerClosed) {
				d.log.Error("proxy stopped", "addr", d.proxyAddr, "err", err)
			}
		}()
		d.log.Info("proxy listening", "addr", d.proxyAddr)
	}
	placer, note := cpuPlacer(d.rt)
	d.notes = append(d.notes, note)
	selfL, err := d.listenSelf()
	if err != nil {
		return err
	}
	selfURL := ""
	if selfL != nil {
		selfURL = "http://" + selfL.Addr().String()
	}
	m, err := serving.New(serving.Options{
		Placer: placer,
		Store:  d.store, Runtime: d.rt, Images: d.images, Network: d.net, Router: router{d.proxy}, Events: d.events,
		Node: cfg.Node, Dir: filepath.Join(cfg.DataDir, "apps"), ProxyAddr: d.proxyAddr, FrozenMemory: frozen,
		SelfURL: selfURL, Clock: clock.Real{}, Logger: d.log, Registerer: d.reg,
	})
	if err != nil {
		if selfL != nil {
			selfL.Close()
		}
		return fmt.Errorf("serving: %w", err)
	}
	if selfL != nil {
		self := &appapi.Server{Platform: m.SelfAPI(), Events: m, Logger: d.log, Clock: clock.Real{}}
		d.start(selfL, self.Handler())
		d.log.Info("self API listening for replicas", "url", selfURL)
	}
	act.m.Store(m)
	if err := m.Start(ctx); err != nil {
		return err
	}
	d.apps = m
	d.notes = append(d.notes, criuNote(ctx))
	return nil
}

// cpuPlacer pins small replicas to CPUs where the host's cgroups allow it,
// and says what it does.
func cpuPlacer(rt *runtime.Runtime) (*placement.CPUs, string) {
	if !rt.CPUSetSupported() {
		return placement.NewCPUs(nil, nil), "placement: replicas are not pinned to CPUs (no cpuset controller)"
	}
	cpus, err := placement.HostCPUs()
	if err != nil || len(cpus) < 2 {
		return placement.NewCPUs(nil, nil), fmt.Sprintf("placement: replicas are not pinned to CPUs (%d CPUs usable, %v)", len(cpus), err)
	}
	return placement.NewCPUs(cpus, nil), fmt.Sprintf("placement: replicas of apps with max_cpu ≤ %g are pinned to one of %d CPUs, an app's replicas apart, the least loaded CPU first", placement.PinMaxCPU, len(cpus))
}

// criuNote says which fast path idle replicas take on this host: the
// freezer always; checkpoint/restore is not used, and why it could not be
// here when CRIU itself refuses.
func criuNote(ctx context.Context) string {
	const base = "idle replicas: cgroup freezer tier (thaw in about a millisecond); stopped replicas cold-start, CRIU checkpoint/restore is not used"
	path, err := exec.LookPath("criu")
	if err != nil {
		return base + " (criu is not installed)"
	}
	ctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	out, err := exec.CommandContext(ctx, path, "check").CombinedOutput()
	if err != nil || bytes.Contains(out, []byte("Error")) {
		lines := strings.Split(strings.TrimSpace(string(out)), "\n")
		return base + " (criu check fails on this host: " + lines[len(lines)-1] + ")"
	}
	return base
}

// closeServing stops taking requests and stops the controllers; replicas
// keep running for the next daemon.
func (d *Daemon) closeServing() {
	if d.proxyAddr != "" {
		ctx, cancel := context.WithTimeout(context.Background(), time.Second)
		d.proxy.Shutdown(ctx)
		cancel()
		d.proxy.Close()
	}
	if d.apps != nil {
		d.apps.Close()
	}
}

// activator hands the proxy's wake-ups to the app manager once it exists.
type activator struct {
	m atomic.Pointer[serving.Manager]
}

func (a *activator) Activate(app string) {
	if m := a.m.Load(); m != nil {
		m.Activate(app)
	}
}

// router is the proxy as serving sees it.
type router struct{ p *proxy.Proxy }

func (r router) SetRoute(rt serving.Route) {
	pr := proxy.Route{App: rt.App, MaxBodyBytes: rt.MaxBodyBytes, QueueLimit: rt.QueueLimit,
		QueueTimeout: rt.QueueTimeout, Unavailable: rt.Unavailable, Weights: rt.Weights, Sticky: rt.Sticky}
	for _, e := range rt.Endpoints {
		pr.Endpoints = append(pr.Endpoints, proxy.Endpoint{ID: e.ID, Addr: e.Addr, Revision: e.Revision})
	}
	r.p.SetRoute(pr)
}

func (r router) RemoveRoute(app string) { r.p.RemoveRoute(app) }

func (r router) Load(app string) serving.Load {
	st := r.p.Stats(app)
	l := serving.Load{InFlight: int(st.InFlight), Queued: int(st.Queued), Requests: st.Requests, LastRequest: st.LastRequest,
		Endpoints: make(map[string]serving.EndpointLoad, len(st.Endpoints))}
	for id, e := range st.Endpoints {
		l.Endpoints[id] = serving.EndpointLoad{InFlight: int(e.InFlight), LastRequest: e.LastRequest}
	}
	return l
}

func (r router) WaitIdle(ctx context.Context, id string) error { return r.p.WaitIdle(ctx, id) }
