package cli

import (
	"fmt"
	"log/slog"
	"os"
	"strings"

	"github.com/spf13/cobra"

	"github.com/shoal-run/shoal/internal/appapi"
	"github.com/shoal-run/shoal/internal/cluster"
	"github.com/shoal-run/shoal/internal/daemon"
	"github.com/shoal-run/shoal/internal/proxy"
)

func newDaemonCmd() *cobra.Command {
	var cfg daemon.Config
	var level, format, pprofAddr string
	cmd := &cobra.Command{
		Use:   "daemon",
		Short: "Run the shoal daemon (as root)",
		Long: `Run the shoal daemon: the API, the image store, the container runtime and
the network. Containers keep running when the daemon stops; the next daemon
adopts them and removes any orphans it has no record of.`,
		Example: `  shoal daemon
  shoal daemon --data-dir /tmp/shoal --api unix:///tmp/shoal.sock
  shoal daemon --store etcd://127.0.0.1:2379 --api-tcp 127.0.0.1:7070
  shoal daemon --store etcd://10.0.0.1:2379,10.0.0.2:2379,10.0.0.3:2379 --node-name n1 --advertise 10.0.0.11:7070
  shoal daemon --ui 127.0.0.1:7080    # the dashboard; open http://127.0.0.1:7080/?token=$(cat /var/lib/shoal/api-token)`,
		Args: exactArgs(0),
		RunE: func(cmd *cobra.Command, _ []string) error {
			var lv slog.Level
			if err := lv.UnmarshalText([]byte(level)); err != nil {
				return usageErrorf("--log-level %q: use debug, info, warn or error", level)
			}
			opts := &slog.HandlerOptions{Level: lv}
			switch format {
			case "text":
				cfg.Logger = slog.New(slog.NewTextHandler(cmd.ErrOrStderr(), opts))
			case "json":
				cfg.Logger = slog.New(slog.NewJSONHandler(cmd.ErrOrStderr(), opts))
			default:
				return usageErrorf("--log-format %q: use text or json", format)
			}
			if cfg.Store != "bolt" && !strings.HasPrefix(cfg.Store, "etcd://") {
				return usageErrorf("--store %q: use bolt or etcd://host:port[,host:port...]", cfg.Store)
			}
			switch cfg.Runtime {
			case "auto", "runc", "crun":
			default:
				return usageErrorf("--runtime %q: use auto, runc or crun", cfg.Runtime)
			}
			if os.Geteuid() != 0 {
				return fmt.Errorf("the daemon must run as root (containers, cgroups and network namespaces need it)")
			}
			slog.SetDefault(cfg.Logger)
			cfg.DebugAddr = pprofAddr
			if pprofAddr != "" {
				_, stop, err := servePprof(pprofAddr, cfg.Logger)
				if err != nil {
					return err
				}
				defer stop()
			}
			cfg.Version = Version
			cfg.Ready = func(d *daemon.Daemon) {
				cfg.Logger.Info("shoal daemon ready", "api", d.API(), "data_dir", d.DataDir(), "store", cfg.Store)
			}
			return daemon.Run(cmd.Context(), cfg)
		},
	}
	f := cmd.Flags()
	f.StringVar(&cfg.DataDir, "data-dir", "/var/lib/shoal", "where images, containers and the embedded store live")
	f.StringVar(&cfg.RunDir, "run-dir", "/run/shoal", "runtime state: runc state, network namespaces")
	f.StringVar(&cfg.API, "api", "", "API unix socket (default unix://<run-dir>/shoal.sock)")
	f.StringVar(&cfg.APITCP, "api-tcp", "", "also serve the API on this TCP address, e.g. 127.0.0.1:7070 (bearer token required)")
	f.StringVar(&cfg.TokenFile, "token-file", "", "bearer token for --api-tcp and --ui (default $SHOAL_TOKEN, or <data-dir>/api-token, made if missing)")
	f.StringVar(&cfg.UI, "ui", "", "serve the dashboard on this TCP address, e.g. 127.0.0.1:7080 (opened with the --api-tcp token)")
	f.StringVar(&cfg.Store, "store", "bolt", "state store: bolt (embedded, one host) or etcd://host:port[,host:port...]")
	f.StringVar(&cfg.Runtime, "runtime", "auto", "OCI runtime: auto, runc or crun")
	f.StringVar(&cfg.Cgroup, "cgroup-parent", "/shoal", "cgroup under which containers are made; cgroups under it that the daemon has no record of are removed at start")
	f.IntVar(&cfg.NetnsPool, "netns-pool", 0, "network namespaces kept ready per network mode (0: default of 4 none and 2 bridge; -1: none, create on each start)")
	f.StringVar(&cfg.Node, "node-name", "", "this node's name in the store (default: the hostname)")
	f.StringVar(&cfg.Advertise, "advertise", "", "with --store etcd: host:port where other nodes reach this one's TCP API (without --api-tcp, the TCP API listens there)")
	f.StringVar(&cfg.AdvertiseProxy, "advertise-proxy", "", "with --store etcd: host:port where other nodes' proxies reach this one's (default: the --advertise host with the --proxy port)")
	f.StringVar(&cfg.SecretsKeyFile, "secrets-key-file", "", "the key apps' secrets are sealed with, 32 bytes, mode 0600 (default <data-dir>/secrets.key, made if missing); every node of a cluster needs the same file")
	f.StringVar(&cfg.ClusterTokenFile, "cluster-token-file", "", "with --store etcd: the secret nodes authenticate each other with, the same file on every node (default: one made by the first node and kept in the store)")
	f.DurationVar(&cfg.NodeTTL, "node-ttl", cluster.DefaultTTL, "with --store etcd: this node's lease; a node that stops renewing it is down after it (1s-1m, whole seconds)")
	f.StringVar(&cfg.Bridge, "bridge", "shoal0", "name of the bridge for --network bridge containers")
	f.StringVar(&cfg.Subnet, "subnet", "10.77.0.0/16", "subnet for --network bridge containers")
	f.StringVar(&cfg.Proxy, "proxy", "127.0.0.1:8080", "where the app proxy listens (Host: <app>.localhost), or off")
	f.StringVar(&cfg.Domain, "domain", "", "also route Host: <app>.<domain> to app")
	f.StringVar(&cfg.ProxyTLS, "proxy-tls", "", "where the app proxy takes HTTPS requests, e.g. :443, with the certificates of shoal cert (default: none)")
	f.StringVar(&cfg.ProxyTCPPorts, "proxy-tcp-ports", "", "ports TCP apps (protocol = \"tcp\") may take on the proxy's address with listen, LO-HI (default 10000-65535); the daemon's own ports are refused whatever the range")
	f.IntVar(&cfg.ProxyLimits.MaxHeadBytes, "proxy-max-head", proxy.DefaultMaxHeadBytes, "largest request head the proxy takes, in bytes (431 beyond it)")
	f.IntVar(&cfg.ProxyLimits.MaxConnsPerClient, "proxy-max-conns", proxy.DefaultMaxConnsPerClient, "connections one client address may hold to the proxy")
	f.StringSliceVar(&cfg.TrustedProxies, "trusted-proxies", nil, "addresses and CIDRs of proxies in front of the app proxy (a TLS terminator) whose X-Forwarded-For/-Proto/-Host and Forwarded fields are kept; anyone else's are replaced")
	f.StringVar(&cfg.ACME.CA, "acme-ca", "", "ACME directory URL to get certificates for apps' domains from, e.g. https://acme-v02.api.letsencrypt.org/directory (default: no ACME)")
	f.StringVar(&cfg.ACME.Email, "acme-email", "", "contact address of the ACME account")
	f.StringVar(&cfg.ACME.CARoot, "acme-ca-root", "", "PEM file of the roots trusted for the ACME CA's API (default: the system's)")
	f.StringSliceVar(&cfg.ACME.Challenges, "acme-challenges", nil, "ACME challenge types answered: http-01 (on --proxy), tls-alpn-01 (on --proxy-tls) (default http-01)")
	f.StringSliceVar(&cfg.ACME.OnDemandAllow, "acme-on-demand-allow", nil, "names (or *.example.com) a certificate may be ordered for on their first TLS handshake though no app claims them")
	f.StringVar(&cfg.ACME.OnDemandAsk, "acme-on-demand-ask", "", "URL asked GET ?domain=NAME before ordering a certificate on a handshake; 200 allows (Caddy's on_demand_tls ask)")
	f.IntVar(&cfg.Premade, "premade", 0, "apps at zero replicas that keep their next replica made ahead, the most recently used first (0: 32; -1: none)")
	f.StringVar(&cfg.PremadeMemory, "premade-memory", "", "memory premade replicas may hold, e.g. 64Mi (default 256Mi)")
	f.StringVar(&cfg.FrozenMemory, "frozen-memory", "", "memory frozen replicas may hold before the least recently used are stopped, e.g. 2Gi (default: a quarter of RAM)")
	f.IntVar(&cfg.SelfAPIPort, "self-api-port", appapi.DefaultPort, "port of the self API that replicas reach at $SHOAL_API_URL on the bridge gateway (0: any free port, -1: off)")
	f.StringVar(&level, "log-level", "info", "log level: debug, info, warn, error")
	f.StringVar(&format, "log-format", "text", "log format: text or json")
	f.StringVar(&pprofAddr, "debug-pprof", "", "serve Go's profiles (/debug/pprof/) on this loopback address, e.g. 127.0.0.1:6060")
	_ = f.MarkHidden("debug-pprof")
	// Small bridges, for tests of a host with several.
	f.IntVar(&cfg.BridgePorts, "bridge-ports", 0, "attachments per bridge, each on its slice of --subnet (0: 1021, a /22 each)")
	_ = f.MarkHidden("bridge-ports")
	return cmd
}
