// Package daemon wires shoal's parts into the long-running daemon: it opens
// the store, the image store, the network manager and the runtime, adopts
// the containers a previous daemon left running, removes orphans, and serves
// the API on a unix socket and optionally on TCP behind a bearer token.
package daemon

import (
	"context"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"

	"github.com/shoal-run/shoal/internal/acme"
	"github.com/shoal-run/shoal/internal/agent"
	"github.com/shoal-run/shoal/internal/certs"
	"github.com/shoal-run/shoal/internal/clock"
	"github.com/shoal-run/shoal/internal/containers"
	"github.com/shoal-run/shoal/internal/dataplane"
	"github.com/shoal-run/shoal/internal/events"
	"github.com/shoal-run/shoal/internal/image"
	"github.com/shoal-run/shoal/internal/labels"
	"github.com/shoal-run/shoal/internal/network"
	"github.com/shoal-run/shoal/internal/proxy"
	"github.com/shoal-run/shoal/internal/runtime"
	"github.com/shoal-run/shoal/internal/secrets"
	"github.com/shoal-run/shoal/internal/serving"
	"github.com/shoal-run/shoal/internal/store"
	"github.com/shoal-run/shoal/internal/userns"
)

// Config is how the daemon is started.
type Config struct {
	DataDir   string // default /var/lib/shoal
	RunDir    string // default /run/shoal
	API       string // unix:///run/shoal/shoal.sock
	APITCP    string // optional host:port
	TokenFile string // bearer token for the TCP API; made when missing
	UI        string // optional host:port of the dashboard (the TCP API's token opens it)
	Store     string // "bolt" or "etcd://host:port,..."
	Runtime   string // auto, runc or crun
	Bridge    string // CNI bridge name (default shoal0)
	Cgroup    string // cgroup parent of every container (default /shoal)
	NetnsPool int    // ready network namespaces per mode (0: default, <0: none)
	Node      string // this node's name in the store (default: the hostname)
	// Advertise is where other nodes reach this one (host:port; cluster
	// only, may be empty). NodeTTL is the node's lease: a node that stops
	// renewing it is down after it (default cluster.DefaultTTL).
	Advertise string
	NodeTTL   time.Duration
	// AdvertiseProxy is where other nodes' proxies reach this node's
	// (host:port; cluster only). Default: the host of Advertise with the
	// port of Proxy, when Proxy does not listen on loopback only.
	AdvertiseProxy string
	// ClusterTokenFile holds the secret the nodes of a cluster send each
	// other; "": the one kept in the store (made by the first node).
	ClusterTokenFile string
	Subnet           string // CNI subnet (default 10.77.0.0/16)
	BridgePorts      int    // attachments per bridge, which sizes its slice of Subnet (0: network.DefaultBridgePorts)
	// Proxy is where the serving proxy listens (default 127.0.0.1:8080;
	// "off": no proxy). Domain also routes <app>.<Domain>.
	Proxy  string
	Domain string
	// ProxyTLS is where the proxy takes HTTPS requests ("": none), with
	// the certificates of `shoal cert`.
	ProxyTLS string
	// ProxyTCPPorts are the ports TCP apps may listen on ("LO-HI";
	// default route.DefaultTCPPorts).
	ProxyTCPPorts string
	// DebugAddr is where Go's profiles are served ("": not), a port no
	// TCP app may take.
	DebugAddr string
	// ProxyLimits bound what one client can hold of the proxy (zero
	// fields: its defaults).
	ProxyLimits proxy.Limits
	// TrustedProxies are the addresses and CIDRs whose X-Forwarded-* and
	// Forwarded fields the proxy keeps (a TLS terminator in front of it);
	// anyone else's it replaces.
	TrustedProxies []string
	// SecretsKeyFile is the key apps' secrets are sealed with (default
	// <data-dir>/secrets.key, made on first use); a cluster's nodes need
	// the same one.
	SecretsKeyFile string
	// FrozenMemory bounds the memory held by frozen replicas ("2Gi";
	// default a quarter of RAM).
	FrozenMemory string
	// Premade is how many apps at zero replicas keep their next replica
	// made ahead, the most recently used first (0: DefaultPremade; -1:
	// none), within PremadeMemory ("64Mi"; default DefaultPremadeMemory).
	Premade       int
	PremadeMemory string
	// SelfAPIPort is where replicas reach the self API on the bridge
	// gateway (the CLI's default is appapi.DefaultPort; 0: any free port;
	// -1: no self API).
	SelfAPIPort int
	// ACME gets apps' domains their certificates (off without a CA).
	ACME    ACMEConfig
	Version string
	Logger  *slog.Logger
	// Ready, if set, is called once the API is being served.
	Ready func(d *Daemon)
}

// Daemon is a running shoal daemon.
type Daemon struct {
	cfg     Config
	log     *slog.Logger
	store   store.Store
	images  *image.Store
	net     *network.Manager
	rt      *runtime.Runtime
	reg     *prometheus.Registry
	ctrs    *containers.Service
	jobs    *jobService
	servers []*http.Server
	token   string
	// tcpL and uiL are the TCP API's and the dashboard's listeners, bound
	// early (bindTCP); nil when not asked for.
	tcpL, uiL net.Listener
	// selfAPI is this node's self API handler; selfFwd, set once the node
	// is in a cluster, relays its replicas' calls to the leader.
	selfAPI http.Handler
	selfFwd atomic.Pointer[agent.Forwarder]
	notes   []string
	// confiner runs apps in user namespaces of their own; nil: as root.
	confiner *userns.Confiner
	locks    []*os.File

	events    *events.Log
	acme      *acme.Manager    // nil without --acme-ca
	plane     *dataplane.Plane // the proxy process; nil with --proxy off
	proxyAddr string
	gatherers prometheus.Gatherers // /metrics: the daemon's and the proxy's
	apps      *serving.Manager
	secrets   *secrets.Store
	certs     *certs.Store    // the certificates the proxy serves
	certsKey  *secrets.Key    // seals their keys and the ACME account's
	route     serving.Router  // the proxy's table, for the dashboard's counters
	cluster   *clusterNode    // nil on bolt: single host
	lead      *leadership     // the leadership every leader-only subsystem follows; nil on bolt
	routing   *clusterRouting // the cluster's routing; nil on bolt

	// jobFetch is the image fetcher the cluster's job runner uses, set
	// once the node has joined (nil on bolt).
	jobFetch *atomic.Pointer[agent.Fetcher]
}

// Run starts the daemon and serves until ctx ends. Containers keep running
// when it stops; the next daemon adopts them.
func Run(ctx context.Context, cfg Config) error {
	if err := cfg.Validate(); err != nil {
		return err
	}
	d := &Daemon{cfg: cfg, log: cfg.Logger}
	defer d.close()
	if err := d.open(ctx); err != nil {
		return err
	}
	if err := d.serve(ctx); err != nil {
		return err
	}
	if cfg.Ready != nil {
		cfg.Ready(d)
	}
	<-ctx.Done()
	d.log.Info("shoal daemon stopping; containers keep running and will be adopted on restart")
	d.ctrs.Stopping()
	// Short requests get a moment to finish; streams of attached runs are
	// then cut (their containers keep running).
	sctx, cancel := context.WithTimeout(context.Background(), time.Second)
	defer cancel()
	for _, s := range d.servers {
		s.Shutdown(sctx)
	}
	return nil
}

func (d *Daemon) open(ctx context.Context) error {
	cfg := d.cfg
	// The containers recovered below were all made before now; a leader
	// may start others on this node once it has joined.
	started := time.Now()
	// Only root may enter: images hold setuid files from untrusted sources,
	// and the run dir holds the API socket.
	for _, dir := range []string{cfg.DataDir, cfg.RunDir} {
		if err := os.MkdirAll(dir, 0o700); err != nil {
			return fmt.Errorf("%s: %w", dir, err)
		}
		if err := os.Chmod(dir, 0o700); err != nil {
			return fmt.Errorf("%s: %w", dir, err)
		}
	}
	if err := d.takeLocks(ctx); err != nil {
		return err
	}
	if err := runtime.BecomeSubreaper(); err != nil {
		return fmt.Errorf("become child subreaper: %w", err)
	}
	st, err := openStore(ctx, cfg)
	if err != nil {
		return err
	}
	d.store = st
	if err := d.openSecrets(ctx); err != nil {
		return err
	}
	if d.images, err = image.Open(filepath.Join(cfg.DataDir, "images"), image.WithLogger(d.log)); err != nil {
		return fmt.Errorf("image store: %w", err)
	}
	d.net, err = network.New(ctx, network.Options{
		StateDir:    filepath.Join(cfg.RunDir, "netns"),
		CNIConfDir:  filepath.Join(cfg.DataDir, "cni"),
		Bridge:      cfg.Bridge,
		PoolSize:    cfg.NetnsPool,
		Subnet:      cfg.Subnet,
		BridgePorts: cfg.BridgePorts,
		Logger:      d.log,
	})
	if err != nil {
		return fmt.Errorf("network: %w", err)
	}
	d.rt, err = runtime.New(ctx, runtime.Options{
		Root:         filepath.Join(cfg.DataDir, "containers"),
		RuntimeRoot:  filepath.Join(cfg.RunDir, "runc"),
		Runtime:      cfg.Runtime,
		CgroupParent: cfg.Cgroup,
		Records:      runtime.StoreRecords{S: st, Node: cfg.Node},
		Clock:        clock.Real{},
		Logger:       d.log,
	})
	if err != nil {
		return fmt.Errorf("runtime: %w", err)
	}
	adopted, _, err := d.rt.Recover(ctx)
	if err != nil {
		return fmt.Errorf("recover containers: %w", err)
	}
	d.sweepSecrets(adopted)
	// Namespaces of containers still running are kept; those of stopped
	// ones (and any orphan) are released now.
	inUse := map[string]string{}
	var running []*runtime.Container
	for _, c := range adopted {
		if c.Status != runtime.StatusStopped {
			// Replicas are serving's to watch and release.
			if c.Labels[labels.Kind] != labels.KindReplica {
				running = append(running, c)
			}
			if c.NetNSPath != "" {
				inUse[c.ID] = c.NetNSPath
			}
		}
	}
	if err := d.net.Restore(ctx, inUse); err != nil {
		return fmt.Errorf("restore network namespaces: %w", err)
	}
	d.reg = prometheus.NewRegistry()
	d.reg.MustRegister(collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	d.gatherers = prometheus.Gatherers{d.reg}
	d.ctrs = containers.New(d.rt, d.images, d.net, d.log, d.reg)
	d.ctrs.WatchAdopted(running)
	if _, ok := d.store.(*store.Etcd); ok {
		d.lead = d.newLeadership()
	}
	if err := d.bindTCP(); err != nil {
		return err
	}
	if err := d.openJobs(ctx); err != nil {
		return err
	}
	if err := d.openServing(ctx); err != nil {
		return err
	}
	if err := d.openACME(ctx); err != nil {
		return err
	}
	if err := d.openCluster(ctx); err != nil {
		return err
	}
	if d.routing != nil && d.cluster != nil {
		d.routing.start(d.apps, d.cluster)
	}
	if d.lead != nil {
		// A node of a cluster keeps the replicas whose records name it;
		// the leader adopts them.
		d.removeStrays(ctx, adopted, started)
	} else {
		d.removeUnownedReplicas(ctx, adopted)
	}
	if cfg.Runtime == "auto" && d.rt.Name() != "crun" {
		if err := runtime.CrunUsable(ctx); err != nil {
			note := fmt.Sprintf("using runc because crun is not usable here (%v)", err)
			d.notes = append(d.notes, note)
			d.log.Warn("using runc", "reason", err)
		}
	}
	return nil
}

func openStore(ctx context.Context, cfg Config) (store.Store, error) {
	switch {
	case cfg.Store == "bolt":
		st, err := store.OpenBolt(filepath.Join(cfg.DataDir, "store.db"))
		if err != nil {
			return nil, fmt.Errorf("store %s: %w", filepath.Join(cfg.DataDir, "store.db"), err)
		}
		return st, nil
	case strings.HasPrefix(cfg.Store, "etcd://"):
		var eps []string
		for _, e := range strings.Split(strings.TrimPrefix(cfg.Store, "etcd://"), ",") {
			if e = strings.TrimSpace(e); e != "" {
				eps = append(eps, "http://"+e)
			}
		}
		if len(eps) == 0 {
			return nil, fmt.Errorf("--store %q: no etcd endpoints", cfg.Store)
		}
		st, err := store.OpenEtcd(ctx, eps)
		if err != nil {
			return nil, fmt.Errorf("store %s: %w", cfg.Store, err)
		}
		return st, nil
	}
	return nil, fmt.Errorf("--store %q: use bolt or etcd://host:port[,host:port...]", cfg.Store)
}

// API returns the unix socket address the daemon serves.
func (d *Daemon) API() string { return d.cfg.API }

// DataDir returns the daemon's data directory.
func (d *Daemon) DataDir() string { return d.cfg.DataDir }

func (d *Daemon) close() {
	for _, s := range d.servers {
		s.Close()
	}
	d.closeTCP()
	// Jobs first: a node that stops queues its running jobs again for the
	// other nodes while it is still a member.
	d.stopTakingJobs()
	d.closeJobs()
	if d.routing != nil {
		d.routing.close()
	}
	d.closeCluster()
	if d.lead != nil {
		d.lead.close()
	}
	d.closeServing()
	if d.ctrs != nil {
		d.ctrs.Drain()
	}
	if d.images != nil {
		d.images.Close()
	}
	if d.rt != nil {
		d.rt.Close() // the disks made ahead
	}
	defer func() {
		for _, f := range d.locks {
			f.Close()
		}
	}()
	if d.net != nil {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		d.net.Close(ctx)
		cancel()
	}
	if d.store != nil {
		d.store.Close()
	}
}
