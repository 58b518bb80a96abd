package serving

import (
	"fmt"

	"github.com/shoal-run/shoal/internal/errdefs"
	"github.com/shoal-run/shoal/internal/manifest"
	"github.com/shoal-run/shoal/internal/route"
)

// tcpTold writes a warning event when the proxy newly says that a TCP
// app's port has no listener of the app's (its port taken by another
// program, or another app's). ctl.mu is held.
func (ctl *appCtl) tcpTold(load route.Load) {
	if load.TCPError == ctl.tcpError {
		return
	}
	ctl.tcpError = load.TCPError
	if load.TCPError != "" && ctl.rec.Config.TCP() {
		ctl.m.emit("warning", ctl.name, "", fmt.Sprintf("listen = %d: the proxy cannot listen: %s", ctl.rec.Config.Listen, load.TCPError), nil)
	}
}

// checkListen refuses a TCP app (protocol = "tcp") whose listen port is
// outside Options.TCPPorts, is one of the daemon's own (OwnPorts), or
// another app of this manager's has, naming that app: the proxy takes
// each port for one app only.
func (m *Manager) checkListen(cfg manifest.Config) error {
	if !cfg.TCP() {
		return nil
	}
	if r := m.o.TCPPorts; !r.Contains(cfg.Listen) {
		return errdefs.Invalid("listen", "port %d is outside the ports TCP apps may listen on, %s (the daemon's --proxy-tcp-ports)", cfg.Listen, r)
	}
	if flag, ok := m.o.OwnPorts[cfg.Listen]; ok {
		return errdefs.Invalid("listen", "port %d is the daemon's own (%s)", cfg.Listen, flag)
	}
	m.mu.Lock()
	ctls := make([]*appCtl, 0, len(m.apps))
	for name, ctl := range m.apps {
		if name != cfg.Name {
			ctls = append(ctls, ctl)
		}
	}
	m.mu.Unlock()
	for _, ctl := range ctls {
		ctl.mu.Lock()
		other, deleting := ctl.rec.Config, ctl.deleting
		ctl.unlock()
		if !deleting && other.TCP() && other.Listen == cfg.Listen {
			return errdefs.Invalid("listen", "port %d is app %q's (each TCP app needs a port of its own)", cfg.Listen, ctl.name)
		}
	}
	return nil
}
