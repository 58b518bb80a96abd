package daemon

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"time"

	"golang.org/x/sys/unix"

	"github.com/shoal-run/shoal/internal/cluster"
	"github.com/shoal-run/shoal/internal/errdefs"
	"github.com/shoal-run/shoal/internal/network"
	"github.com/shoal-run/shoal/internal/proxy"
	"github.com/shoal-run/shoal/internal/route"
	"github.com/shoal-run/shoal/internal/runtime"
	"github.com/shoal-run/shoal/internal/units"
)

func (c *Config) defaults() {
	if c.DataDir == "" {
		c.DataDir = "/var/lib/shoal"
	}
	if c.RunDir == "" {
		c.RunDir = "/run/shoal"
	}
	if c.API == "" {
		c.API = "unix://" + filepath.Join(c.RunDir, "shoal.sock")
	}
	if c.Store == "" {
		c.Store = "bolt"
	}
	if c.Runtime == "" {
		c.Runtime = "auto"
	}
	if c.Cgroup == "" {
		c.Cgroup = runtime.DefaultCgroupParent
	}
	if c.Node == "" {
		c.Node, _ = os.Hostname()
	}
	if c.NodeTTL == 0 {
		c.NodeTTL = cluster.DefaultTTL
	}
	if c.Logger == nil {
		c.Logger = slog.Default()
	}
	if c.Proxy == "" {
		c.Proxy = "127.0.0.1:8080"
	}
}

var nameRE = regexp.MustCompile(`^[a-zA-Z0-9][a-zA-Z0-9_.-]{0,62}$`)

// Validate checks the configuration before anything is created, naming the
// flag of a bad value (errors match errdefs.ErrInvalid).
func (c *Config) Validate() error {
	c.defaults()
	for _, d := range []struct {
		flag string
		dir  *string
	}{{"data-dir", &c.DataDir}, {"run-dir", &c.RunDir}} {
		abs, err := filepath.Abs(*d.dir)
		if err != nil {
			return errdefs.Invalid("--"+d.flag, "%q: %v", *d.dir, err)
		}
		*d.dir = abs
	}
	if c.Proxy != "off" {
		if _, _, err := net.SplitHostPort(c.Proxy); err != nil {
			return errdefs.Invalid("--proxy", "%q is not host:port (or off)", c.Proxy)
		}
	}
	if c.ProxyTLS != "" {
		if c.Proxy == "off" {
			return errdefs.Invalid("--proxy-tls", "%q: this daemon runs no proxy (--proxy off)", c.ProxyTLS)
		}
		if _, _, err := net.SplitHostPort(c.ProxyTLS); err != nil {
			return errdefs.Invalid("--proxy-tls", "%q is not host:port", c.ProxyTLS)
		}
	}
	if c.ProxyTCPPorts != "" {
		if _, err := route.ParsePortRange(c.ProxyTCPPorts); err != nil {
			return errdefs.Invalid("--proxy-tcp-ports", "%v", err)
		}
	}
	if _, err := proxy.ParseTrustList(c.TrustedProxies); err != nil {
		return errdefs.Invalid("--trusted-proxies", "%v", err)
	}
	if c.FrozenMemory != "" {
		if _, err := units.ParseBytes(c.FrozenMemory); err != nil {
			return errdefs.Invalid("--frozen-memory", "%v", err)
		}
	}
	if c.Premade < -1 {
		return errdefs.Invalid("--premade", "%d is below -1 (none)", c.Premade)
	}
	if c.PremadeMemory != "" {
		if _, err := units.ParseBytes(c.PremadeMemory); err != nil {
			return errdefs.Invalid("--premade-memory", "%v", err)
		}
	}
	if c.Subnet != "" {
		if _, _, err := net.ParseCIDR(c.Subnet); err != nil {
			return errdefs.Invalid("--subnet", "%q is not a CIDR subnet such as 10.77.0.0/16", c.Subnet)
		}
	}
	if c.BridgePorts < 0 || c.BridgePorts > network.DefaultBridgePorts {
		return errdefs.Invalid("--bridge-ports", "%d is not 0 (the default) to %d", c.BridgePorts, network.DefaultBridgePorts)
	}
	if c.Bridge != "" && (len(c.Bridge) > 15 || !nameRE.MatchString(c.Bridge)) {
		return errdefs.Invalid("--bridge", "%q is not an interface name (letters, digits, _.-, at most 15)", c.Bridge)
	}
	parent := "/" + strings.Trim(c.Cgroup, "/")
	for _, part := range strings.Split(strings.Trim(parent, "/"), "/") {
		if !nameRE.MatchString(part) {
			return errdefs.Invalid("--cgroup-parent", "%q is not a cgroup path such as /shoal", c.Cgroup)
		}
	}
	c.Cgroup = parent
	if !nameRE.MatchString(c.Node) {
		return errdefs.Invalid("--node-name", "%q is not a node name (letters, digits, _.-)", c.Node)
	}
	if c.NodeTTL < time.Second || c.NodeTTL > time.Minute {
		return errdefs.Invalid("--node-ttl", "%s: use a lease between 1s and 1m (etcd rounds up to whole seconds, and its own minimum is 2s by default)", c.NodeTTL)
	}
	if c.Advertise != "" {
		if err := checkAdvertise(c.Advertise); err != nil {
			return errdefs.Invalid("--advertise", "%q: %v", c.Advertise, err)
		}
	}
	if err := c.advertiseProxy(); err != nil {
		return err
	}
	if c.ClusterTokenFile != "" && c.Store == "bolt" {
		return errdefs.Invalid("--cluster-token-file", "a single-host daemon (--store bolt) has no cluster; use it with --store etcd://...")
	}
	if c.SelfAPIPort < -1 || c.SelfAPIPort > 65535 {
		return errdefs.Invalid("--self-api-port", "%d is not a port number (0: any free port, -1: no self API)", c.SelfAPIPort)
	}
	if c.UI != "" {
		host, _, err := net.SplitHostPort(c.UI)
		if err != nil {
			return errdefs.Invalid("--ui", "%q is not host:port", c.UI)
		}
		if ip := net.ParseIP(host); ip == nil || !ip.IsLoopback() {
			c.Logger.Warn("the dashboard is not on loopback: its token and cookie travel in clear text; put it behind TLS", "addr", c.UI)
		}
	}
	if err := c.ACME.validate(c.Proxy == "off"); err != nil {
		return err
	}
	if c.APITCP != "" {
		host, _, err := net.SplitHostPort(c.APITCP)
		if err != nil {
			return errdefs.Invalid("--api-tcp", "%q is not host:port", c.APITCP)
		}
		if ip := net.ParseIP(host); ip == nil || !ip.IsLoopback() {
			c.Logger.Warn("the TCP API is not on loopback: its bearer token travels in clear text; put it behind TLS", "addr", c.APITCP)
		}
	}
	return nil
}

// advertiseProxy checks --advertise-proxy, or makes it from --advertise
// and --proxy.
func (c *Config) advertiseProxy() error {
	if c.AdvertiseProxy != "" {
		if c.Proxy == "off" {
			return errdefs.Invalid("--advertise-proxy", "%q: this daemon runs no proxy (--proxy off)", c.AdvertiseProxy)
		}
		if err := checkAdvertise(c.AdvertiseProxy); err != nil {
			return errdefs.Invalid("--advertise-proxy", "%q: %v", c.AdvertiseProxy, err)
		}
		return nil
	}
	if c.Advertise == "" || c.Proxy == "off" {
		return nil
	}
	host, _, _ := net.SplitHostPort(c.Advertise)
	phost, port, _ := net.SplitHostPort(c.Proxy)
	if ip := net.ParseIP(phost); phost == "localhost" || (ip != nil && ip.IsLoopback()) {
		c.Logger.Warn("the proxy listens on loopback only: other nodes cannot send it requests for this node's replicas; give --proxy an address they reach, or --advertise-proxy", "proxy", c.Proxy)
		return nil
	}
	c.AdvertiseProxy = net.JoinHostPort(host, port)
	return nil
}

// checkAdvertise accepts host:port where host is an IP other nodes can reach
// (not 0.0.0.0) or a DNS name, and port is 1-65535.
func checkAdvertise(addr string) error {
	host, port, err := net.SplitHostPort(addr)
	if err != nil {
		return fmt.Errorf("not host:port")
	}
	if n, err := strconv.Atoi(port); err != nil || n < 1 || n > 65535 {
		return fmt.Errorf("port %q is not 1-65535", port)
	}
	if ip := net.ParseIP(host); ip != nil {
		if ip.IsUnspecified() {
			return fmt.Errorf("%s is not an address other nodes can reach", host)
		}
		return nil
	}
	if !hostRE.MatchString(host) {
		return fmt.Errorf("host %q is neither an IP address nor a DNS name", host)
	}
	return nil
}

var hostRE = regexp.MustCompile(`^[a-zA-Z0-9]([a-zA-Z0-9-]{0,61}[a-zA-Z0-9])?(\.[a-zA-Z0-9]([a-zA-Z0-9-]{0,61}[a-zA-Z0-9])?)*$`)

// lockFile takes an exclusive lock on path, or says who holds it.
func lockFile(path, what string) (*os.File, error) {
	if err := os.MkdirAll(filepath.Dir(path), 0o700); err != nil {
		return nil, fmt.Errorf("lock %s: %w", path, err)
	}
	f, err := os.OpenFile(path, os.O_RDWR|os.O_CREATE, 0o600)
	if err != nil {
		return nil, fmt.Errorf("lock %s: %w", path, err)
	}
	if err := unix.Flock(int(f.Fd()), unix.LOCK_EX|unix.LOCK_NB); err != nil {
		f.Close()
		if errors.Is(err, unix.EWOULDBLOCK) {
			return nil, fmt.Errorf("%s is in use by another shoal daemon (lock %s): %w", what, path, errdefs.ErrConflict)
		}
		return nil, fmt.Errorf("lock %s: %w", path, err)
	}
	f.Truncate(0)
	fmt.Fprintf(f, "%d\n", os.Getpid())
	return f, nil
}

// takeLocks makes sure no other daemon uses this run dir, data dir or
// cgroup parent, before this one adopts or removes anything.
func (d *Daemon) takeLocks(_ context.Context) error {
	cfg := d.cfg
	cg := "cgroup" + strings.ReplaceAll(cfg.Cgroup, "/", "-")
	for _, l := range []struct{ path, what string }{
		{filepath.Join(cfg.RunDir, "daemon.lock"), "run dir " + cfg.RunDir},
		{filepath.Join(cfg.DataDir, "daemon.lock"), "data dir " + cfg.DataDir},
		{filepath.Join("/run/lock/shoal", cg+".lock"), "cgroup parent " + cfg.Cgroup},
	} {
		f, err := lockFile(l.path, l.what)
		if err != nil {
			return err
		}
		d.locks = append(d.locks, f)
	}
	return nil
}
