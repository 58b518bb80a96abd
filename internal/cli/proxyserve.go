package cli

import (
	"fmt"
	"log/slog"
	"net"
	"os"
	"os/signal"
	"syscall"

	"github.com/spf13/cobra"

	"github.com/shoal-run/shoal/internal/dataplane"
	"github.com/shoal-run/shoal/internal/proxy"
	"github.com/shoal-run/shoal/internal/route"
)

func init() { extraCommands = append(extraCommands, newProxyServeCmd) }

// newProxyServeCmd is the daemon's proxy process: the daemon starts it with
// the proxy's listener as fd 3, the control socket as fd 4 and, with
// --tls-listener, the HTTPS listener as fd 5. It is
// hidden: people do not call it.
func newProxyServeCmd(*globals) *cobra.Command {
	var c dataplane.ServeConfig
	var level, logFile string
	var trusted []string
	var tlsListener bool
	var tcpPorts string
	cmd := &cobra.Command{
		Use:    "proxy-serve",
		Short:  "The daemon's HTTP proxy process (internal)",
		Hidden: true,
		Args:   exactArgs(0),
		RunE: func(cmd *cobra.Command, _ []string) error {
			var lv slog.Level
			var err error
			if err := lv.UnmarshalText([]byte(level)); err != nil {
				return usageErrorf("--log-level %q: use debug, info, warn or error", level)
			}
			// Its output is a file; a hang-up has no meaning for it.
			signal.Ignore(syscall.SIGHUP, syscall.SIGPIPE)
			out := cmd.ErrOrStderr()
			if logFile != "" {
				// stderr is that file: rotated while the proxy runs.
				out = dataplane.NewRotatingLog(logFile, 2, 0)
			}
			c.Logger = slog.New(slog.NewTextHandler(out, &slog.HandlerOptions{Level: lv})).With("proc", "proxy")
			c.Version = Version
			if c.TrustedProxies, err = proxy.ParseTrustList(trusted); err != nil {
				return usageErrorf("--trusted-proxies: %v", err)
			}
			if tcpPorts != "" {
				if c.TCPPorts, err = route.ParsePortRange(tcpPorts); err != nil {
					return usageErrorf("--tcp-ports: %v", err)
				}
			}
			if c.Listener, err = inherited(3, "proxy listener"); err != nil {
				return err
			}
			if c.Control, err = inherited(4, "proxy control socket"); err != nil {
				return err
			}
			if tlsListener {
				if c.TLSListener, err = inherited(5, "proxy TLS listener"); err != nil {
					return err
				}
			}
			return dataplane.Serve(cmd.Context(), c)
		},
	}
	f := cmd.Flags()
	f.StringVar(&c.DaemonAPI, "api", "", "path of the daemon's API unix socket, called to wake cold apps")
	f.StringVar(&c.Domain, "domain", "", "also route Host: <app>.<domain> to app")
	f.StringVar(&level, "log-level", "info", "log level: debug, info, warn, error")
	f.StringVar(&logFile, "log-file", "", "the file stderr writes to, rotated past 4 MiB")
	f.IntVar(&c.Limits.MaxHeadBytes, "max-head-bytes", 0, "largest request head (0: 32 KiB)")
	f.IntVar(&c.Limits.MaxConnsPerClient, "max-conns-per-client", 0, "connections one client address may hold (0: 256)")
	f.StringSliceVar(&trusted, "trusted-proxies", nil, "addresses and CIDRs whose forwarded fields are kept")
	f.BoolVar(&c.OnDemand, "on-demand", false, "ask the daemon for a certificate on a handshake no certificate serves")
	f.StringVar(&tcpPorts, "tcp-ports", "", "ports TCP routes may listen on, LO-HI (default 10000-65535)")
	f.BoolVar(&tlsListener, "tls-listener", false, "descriptor 5 is the HTTPS listener")
	return cmd
}

// inherited turns descriptor fd, passed by the daemon, into a listener.
func inherited(fd uintptr, what string) (net.Listener, error) {
	f := os.NewFile(fd, what)
	if f == nil {
		return nil, fmt.Errorf("%s: descriptor %d is not open (started by the daemon only)", what, fd)
	}
	defer f.Close()
	l, err := net.FileListener(f)
	if err != nil {
		return nil, fmt.Errorf("%s: descriptor %d: %w", what, fd, err)
	}
	return l, nil
}
