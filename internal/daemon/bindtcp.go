package daemon

import (
	"fmt"
	"net"

	"github.com/shoal-run/shoal/internal/store"
)

// bindTCP binds the TCP listeners of the API (--api-tcp, or a node's
// --advertise) and the dashboard (--ui) before the proxy is given a route:
// a tenant's TCP route restored at start (an app whose listen port is one
// of these since a change of flags) cannot take their port first. serve
// serves them; close closes them when the daemon stops before.
func (d *Daemon) bindTCP() error {
	if addr := d.tcpAddr(); addr != "" {
		flag := "--api-tcp"
		if d.cfg.APITCP == "" {
			flag = "--advertise"
		}
		l, err := net.Listen("tcp", addr)
		if err != nil {
			return fmt.Errorf("%s %s: %w", flag, addr, err)
		}
		d.tcpL = l
	}
	if d.cfg.UI != "" {
		l, err := net.Listen("tcp", d.cfg.UI)
		if err != nil {
			return fmt.Errorf("--ui %s: %w", d.cfg.UI, err)
		}
		d.uiL = l
	}
	return nil
}

// tcpAddr is where the TCP API listens: --api-tcp, or on a node of a
// cluster without it, the --advertise address (other nodes reach the agent
// there).
func (d *Daemon) tcpAddr() string {
	if _, ok := d.store.(*store.Etcd); ok && d.cfg.APITCP == "" {
		return d.cfg.Advertise
	}
	return d.cfg.APITCP
}

// closeTCP closes the listeners bindTCP made (serving them or not).
func (d *Daemon) closeTCP() {
	for _, l := range []net.Listener{d.tcpL, d.uiL} {
		if l != nil {
			l.Close()
		}
	}
}
