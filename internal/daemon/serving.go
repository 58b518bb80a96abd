package daemon

import (
	"bytes"
	"context"
	"fmt"
	"net/url"
	"os"
	"path/filepath"

	"github.com/shoal-run/shoal/internal/appapi"
	"github.com/shoal-run/shoal/internal/clock"
	"github.com/shoal-run/shoal/internal/dataplane"
	"github.com/shoal-run/shoal/internal/dispatch"
	"github.com/shoal-run/shoal/internal/events"
	"github.com/shoal-run/shoal/internal/localnode"
	"github.com/shoal-run/shoal/internal/placement"
	"github.com/shoal-run/shoal/internal/proxy"
	"github.com/shoal-run/shoal/internal/runtime"
	"github.com/shoal-run/shoal/internal/serving"
	"github.com/shoal-run/shoal/internal/store"
	"github.com/shoal-run/shoal/internal/units"
)

// eventsKept is how many events the event log keeps.
const eventsKept = 10000

// The default budget of premade replicas (--premade, --premade-memory):
// each holds about a megabyte (docs/benchmarks.md).
const (
	DefaultPremade       = 32
	DefaultPremadeMemory = 256 << 20
)

// openServing starts the event log, the proxy and the app manager, which
// adopts the replicas a previous daemon left running.
func (d *Daemon) openServing(ctx context.Context) error {
	cfg := d.cfg
	if d.events == nil {
		d.events = events.New(d.store, clock.Real{}, eventsKept)
	}
	var frozen int64
	if cfg.FrozenMemory != "" {
		frozen, _ = units.ParseBytes(cfg.FrozenMemory) // validated
	}
	premade, premadeMem := cfg.Premade, int64(DefaultPremadeMemory)
	switch {
	case premade == 0:
		premade = DefaultPremade
	case premade < 0:
		premade = 0
	}
	if cfg.PremadeMemory != "" {
		premadeMem, _ = units.ParseBytes(cfg.PremadeMemory) // validated
	}
	var router serving.Router
	if cfg.Proxy != "off" {
		// The proxy is a process of its own (the data plane): it outlives a
		// crash of this one, which adopts it again at its next start.
		pl, err := dataplane.Open(ctx, dataplane.Options{
			Addr: cfg.Proxy, TLSAddr: cfg.ProxyTLS, Domain: cfg.Domain, RunDir: cfg.RunDir, DaemonAPI: unixPath(cfg.API),
			Version: cfg.Version, Logger: d.log, Limits: cfg.ProxyLimits,
			TrustedProxies: cfg.TrustedProxies,
			OnDemand:       cfg.ACME.CA != "" && (len(cfg.ACME.OnDemandAllow) > 0 || cfg.ACME.OnDemandAsk != ""),
			TCPPorts:       cfg.tcpPorts(),
		})
		if err != nil {
			return err
		}
		d.plane = pl
		d.proxyAddr = pl.Addr()
		router = pl.Client()
		d.gatherers = append(d.gatherers, pl.Client())
	} else {
		// No proxy: serving still needs a table, which nothing serves.
		dataplane.StopStale(ctx, cfg.RunDir, d.log)
		router = proxy.New(proxy.Options{Domain: cfg.Domain, Logger: d.log})
	}
	if _, ok := d.store.(*store.Etcd); ok {
		// A node of a cluster: the leader's routes reach every node's
		// proxy through the store, other nodes' replicas through hops.
		d.routing = d.clusterRoutingOver(router)
		router = d.routing.router
	}
	d.route = router
	placer, note := cpuPlacer(d.rt)
	d.notes = append(d.notes, note)
	selfL, err := d.listenSelf()
	if err != nil {
		return err
	}
	selfURL := ""
	if selfL != nil {
		selfURL = "http://" + selfL.Addr().String()
		if err := d.allowHostPorts(selfL.Addr().String()); err != nil {
			selfL.Close()
			return err
		}
	}
	// An app may call another through the proxy, as its clients do.
	if err := d.allowHostPorts(d.proxyAddr); err != nil {
		if selfL != nil {
			selfL.Close()
		}
		return err
	}
	initBin, err := d.appInit()
	if err != nil {
		if selfL != nil {
			selfL.Close()
		}
		return err
	}
	d.ctrs.KeepPremade(initBin) // `run --rm` takes containers made ahead too
	appsDir := filepath.Join(cfg.DataDir, "apps")
	lo := localnode.Options{Runtime: d.rt, Images: d.images, Network: d.net, Router: router, Placer: placer,
		Dir: appsDir, Init: initBin, Clock: clock.Real{}, Logger: d.log, Version: cfg.Version,
		SecretsDir: d.secretsDir(), Secrets: d.secrets}
	if _, ok := d.store.(*store.Etcd); ok {
		var why string
		if lo.PeerHost, why = peerHost(ctx, cfg.Advertise); why != "" {
			d.log.Warn("stateful apps' peer ports are not published on this node", "advertise", cfg.Advertise, "why", why)
		}
	}
	o := serving.Options{
		Store: d.store, Images: d.images, Router: router, Events: servingEvents{d.events},
		Node: cfg.Node, Dir: appsDir, ProxyAddr: d.proxyAddr, FrozenMemory: frozen, Premade: premade, PremadeMemory: premadeMem,
		SelfURL: selfURL, Clock: clock.Real{}, Logger: d.log, Registerer: d.reg,
		TCPPorts: cfg.tcpPorts(), OwnPorts: d.ownPorts(selfURL),
	}
	if c := d.openConfiner(); c != nil {
		d.confiner, o.Confiner, lo.Confiner = c, c, c
	}
	local, err := localnode.New(lo)
	if err != nil {
		if selfL != nil {
			selfL.Close()
		}
		return fmt.Errorf("serving: %w", err)
	}
	o.Local, o.Hooks = local, local
	go d.followSecrets(ctx, local)
	if d.plane != nil {
		go d.followCerts(ctx)
	}
	if _, ok := d.store.(*store.Etcd); ok {
		// A node of a cluster: the apps run on the leader, which reaches
		// the other nodes through their agents.
		o.Cluster = d.lead.hub
		o.Dispatcher = dispatch.New(dispatch.Options{Self: cfg.Node, Local: local, Remote: d.remoteNode, Dir: appsDir,
			Clock: clock.Real{}, Logger: d.log})
	}
	m, err := serving.New(o)
	if err != nil {
		if selfL != nil {
			selfL.Close()
		}
		return fmt.Errorf("serving: %w", err)
	}
	if d.lead != nil {
		// Established after the routes, which it publishes through.
		d.lead.hub.Register(m)
	}
	if selfL != nil {
		self := &appapi.Server{Platform: m.SelfAPI(), Events: m, Logger: d.log, Clock: clock.Real{}}
		if _, ok := d.store.(*store.Etcd); ok {
			self.Node = cfg.Node
		}
		d.selfAPI = self.Handler()
		d.serveSelf(selfL, d.selfRelay(d.selfAPI))
		d.log.Info("self API listening for replicas", "url", selfURL)
		d.notes = append(d.notes, "self API for replicas at "+selfURL+" (on the bridge gateway; $SHOAL_API_URL)")
	}
	d.apps = m // closed by closeServing, also when Start fails
	if err := m.Start(ctx); err != nil {
		return err
	}
	if d.plane != nil {
		// Every app has set its route by now: the proxy forgets the apps
		// this daemon no longer has.
		if err := d.plane.Client().Sync(); err != nil {
			d.log.Error("proxy: push the route table", "err", err)
		}
	}
	d.notes = append(d.notes, criuNote(ctx))
	return nil
}

// appInit installs the shoal-init found beside this binary as the apps'
// init (<data-dir>/apps/.shoal-init, a copy: the binary beside shoal may
// be rebuilt while replicas run) and returns its path; "" with a note
// when there is none, so that apps run as their own pid 1.
func (d *Daemon) appInit() (string, error) {
	self, err := os.Executable()
	if err != nil {
		return "", fmt.Errorf("apps' init: %w", err)
	}
	b, err := os.ReadFile(filepath.Join(filepath.Dir(self), "shoal-init"))
	if err != nil {
		d.log.Warn("apps run without an init: shoal-init is not beside shoal", "err", err)
		d.notes = append(d.notes, "apps: no init (shoal-init is not beside shoal): each app is its replica's pid 1")
		return "", nil
	}
	dir := filepath.Join(d.cfg.DataDir, "apps")
	dst := filepath.Join(dir, ".shoal-init")
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return "", fmt.Errorf("apps' init: %w", err)
	}
	if old, err := os.ReadFile(dst); err == nil && bytes.Equal(old, b) {
		return dst, nil
	}
	if err := os.WriteFile(dst+".tmp", b, 0o755); err != nil {
		return "", fmt.Errorf("apps' init: %w", err)
	}
	if err := os.Rename(dst+".tmp", dst); err != nil {
		return "", fmt.Errorf("apps' init: %w", err)
	}
	return dst, nil
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

// criuNote says which tiers idle replicas take on this host: the freezer
// always, then a checkpoint to disk where CRIU works; and which CRIU that
// is, its version and whether `criu check` passed, or why there is none.
// Apps in user namespaces of their own are checkpointed as others are.
func criuNote(ctx context.Context) string {
	c := runtime.FindCRIU(ctx)
	tiers := "idle replicas: cgroup freezer tier (thaw in about a millisecond), then after freeze_timeout a CRIU checkpoint on disk that the next start restores"
	if !c.Usable() {
		tiers = "idle replicas: cgroup freezer tier (thaw in about a millisecond); stopped replicas cold-start, no checkpoint tier"
	}
	return tiers + "; CRIU: " + c.String()
}

// closeServing drains and stops the proxy process and stops the
// controllers; replicas keep running for the next daemon.
func (d *Daemon) closeServing() {
	if d.plane != nil {
		if err := d.plane.Stop(context.Background()); err != nil {
			d.log.Warn("proxy: stop", "err", err)
		}
	}
	if d.apps != nil {
		d.apps.Close()
	}
	if d.confiner != nil {
		if err := d.confiner.Close(); err != nil {
			d.log.Warn("userns: unmount layers", "err", err)
		}
	}
}

// unixPath is the socket path of a unix:// address.
func unixPath(addr string) string {
	if u, err := url.Parse(addr); err == nil && u.Scheme == "unix" {
		return u.Path
	}
	return ""
}
