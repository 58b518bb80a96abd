package daemon

import (
	"net"
	"net/url"
	"strconv"
	"strings"

	"github.com/shoal-run/shoal/internal/route"
)

// tcpPorts is --proxy-tcp-ports (validated), or the default.
func (c *Config) tcpPorts() route.PortRange {
	r, _ := route.ParsePortRange(c.ProxyTCPPorts)
	return r.OrDefault()
}

// ownPorts are the ports this daemon listens on, or connects to for its
// store, by the flag that names each: no TCP app may take one, for the
// proxy would bind it on the daemon's host (at start the daemon binds its
// own TCP listeners before it pushes a route: bindTCP).
func (d *Daemon) ownPorts(selfURL string) map[int]string {
	cfg := d.cfg
	own := map[int]string{}
	add := func(flag, addr string) {
		if _, p, err := net.SplitHostPort(addr); err == nil {
			if n, err := strconv.Atoi(p); err == nil && n > 0 {
				if _, ok := own[n]; !ok {
					own[n] = flag
				}
			}
		}
	}
	add("--proxy", d.proxyAddr)
	if cfg.Proxy != "off" {
		add("--proxy", cfg.Proxy)
	}
	add("--proxy-tls", cfg.ProxyTLS)
	add("--api-tcp", cfg.APITCP)
	add("--advertise", cfg.Advertise)
	add("--advertise-proxy", cfg.AdvertiseProxy)
	add("--ui", cfg.UI)
	add("--debug-pprof", cfg.DebugAddr)
	if u, err := url.Parse(selfURL); err == nil && selfURL != "" {
		add("--self-api-port", u.Host)
	}
	if cfg.SelfAPIPort > 0 {
		add("--self-api-port", net.JoinHostPort("", strconv.Itoa(cfg.SelfAPIPort)))
	}
	if rest, ok := strings.CutPrefix(cfg.Store, "etcd://"); ok {
		for _, e := range strings.Split(rest, ",") {
			add("--store", strings.TrimSpace(e))
		}
	}
	return own
}
