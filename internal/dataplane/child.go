package dataplane

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"os"
	"strings"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/shoal-run/shoal/internal/proxy"
	"github.com/shoal-run/shoal/internal/route"
)

// ServeConfig is the proxy process's side.
type ServeConfig struct {
	Listener net.Listener // requests (inherited from the daemon)
	// TLSListener takes HTTPS requests (inherited; nil: none).
	TLSListener net.Listener
	Control     net.Listener // the control socket (inherited from the daemon)
	// DaemonAPI is the path of the daemon's API unix socket, called to wake
	// cold apps.
	DaemonAPI string
	Domain    string
	Version   string
	Logger    *slog.Logger
	Limits    proxy.Limits
	// TrustedProxies are the peers whose forwarded fields are kept.
	TrustedProxies proxy.TrustList
	// OnDemand: a handshake no certificate serves asks the daemon for one.
	OnDemand bool
	// TCPPorts are the ports TCP routes may listen on (zero: the default).
	TCPPorts route.PortRange
}

// Serve runs the proxy process until ctx ends (then it drains for up to
// drainOnSignal) or the daemon asks it to stop over the control socket.
func Serve(ctx context.Context, c ServeConfig) error {
	if c.Listener == nil || c.Control == nil {
		return errors.New("proxy-serve: the listener and the control socket are required")
	}
	log := c.Logger
	if log == nil {
		log = slog.Default()
	}
	act := newActivator(c.DaemonAPI, log)
	reg := prometheus.NewRegistry()
	o := proxy.Options{Activator: act, Domain: c.Domain, Registerer: reg, Logger: log, Limits: c.Limits,
		TrustedProxies: c.TrustedProxies, TCPPorts: c.TCPPorts}
	// TCP routes listen on the proxy's own address, each on its port.
	if host, _, err := net.SplitHostPort(c.Listener.Addr().String()); err == nil {
		o.TCPHost = host
	}
	if c.OnDemand {
		o.CertMissing = act.CertMissing
	}
	p := proxy.New(o)
	act.queued = func(app string) bool { return p.Load(app).Queued > 0 }

	var once sync.Once
	stopped := make(chan struct{})
	stop := func(grace time.Duration) {
		once.Do(func() {
			ctx, cancel := context.WithTimeout(context.Background(), grace)
			if err := p.Shutdown(ctx); err != nil {
				log.Warn("proxy: drain cut short", "grace", grace, "err", err)
			}
			cancel()
			p.Close()
			close(stopped)
		})
	}
	info := Info{Pid: os.Getpid(), Addr: c.Listener.Addr().String(), Domain: c.Domain, Version: c.Version, Started: time.Now(),
		TCPPorts: c.TCPPorts.String(),
		Trusted:  strings.Join(c.TrustedProxies.Strings(), ","), OnDemand: c.OnDemand}
	if c.TLSListener != nil {
		info.TLSAddr = c.TLSListener.Addr().String()
	}
	ctl := newControl(p, info, reg, stop, log)
	cs := &http.Server{Handler: ctl.handler(), ReadHeaderTimeout: 10 * time.Second}
	go func() {
		if err := cs.Serve(c.Control); err != nil && !errors.Is(err, http.ErrServerClosed) {
			log.Error("proxy: control socket", "err", err)
		}
	}()
	served := make(chan error, 2)
	go func() { served <- p.Serve(c.Listener) }()
	if c.TLSListener != nil {
		go func() { served <- p.ServeTLS(c.TLSListener) }()
	}
	log.Info("proxy process serving", "addr", info.Addr, "tls_addr", info.TLSAddr, "pid", info.Pid, "control", c.Control.Addr().String())

	var err error
	select {
	case <-ctx.Done():
		stop(drainOnSignal)
	case <-stopped:
	case err = <-served:
		if errors.Is(err, http.ErrServerClosed) {
			err = nil
		} else {
			err = fmt.Errorf("proxy %s: %w", info.Addr, err)
		}
		stop(0)
	}
	// Let the answer to a shutdown call reach the daemon.
	sctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	cs.Shutdown(sctx)
	cancel()
	act.close()
	log.Info("proxy process stopped", "addr", info.Addr)
	return err
}

// drainOnSignal bounds the drain of a proxy process told to stop by a
// signal rather than by its daemon.
const drainOnSignal = 10 * time.Second
