package daemon

import (
	"net/http"

	"github.com/shoal-run/shoal/internal/agent"
)

// tcpHandler is what the TCP API serves: the user API behind its token and,
// on a node of a cluster, the agent's routes behind the cluster secret. A
// single-host daemon serves the user API only.
func (d *Daemon) tcpHandler(api http.Handler) http.Handler {
	if d.cluster == nil || d.cluster.agent == nil {
		return api
	}
	mux := http.NewServeMux()
	mux.Handle(agent.Prefix, d.cluster.agent.Handler())
	mux.Handle("/", api)
	return mux
}

// tcpAddr is where the TCP API listens: --api-tcp, or on a node of a
// cluster without it, the --advertise address (other nodes reach the agent
// there).
func (d *Daemon) tcpAddr() string {
	if d.cfg.APITCP == "" && d.cluster != nil {
		return d.cfg.Advertise
	}
	return d.cfg.APITCP
}
