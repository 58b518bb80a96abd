package daemon

import (
	"context"
	"net/http"

	"github.com/shoal-run/shoal/internal/agent"
	"github.com/shoal-run/shoal/internal/api"
	"github.com/shoal-run/shoal/internal/cluster"
)

// tcpHandler is what the TCP API serves: the user API behind its token and,
// on a node of a cluster, the agent's routes and the image registry (/v2/)
// behind the cluster secret. A single-host daemon serves the user API only.
func (d *Daemon) tcpHandler(api http.Handler) http.Handler {
	if d.cluster == nil || d.cluster.agent == nil {
		return api
	}
	mux := http.NewServeMux()
	mux.Handle(agent.Prefix, d.cluster.agent.Handler())
	mux.Handle(agent.RegistryPrefix, d.cluster.agent.Registry())
	mux.Handle("/", api)
	return mux
}

// forwardApps makes a node of a cluster send the app requests of its API
// (unix socket and TCP) to the leader while it follows, and serve those
// that followers forward to it while it leads. A single host serves its
// own.
func (d *Daemon) forwardApps(srv *api.Server) {
	if d.cluster == nil || d.cluster.agent == nil {
		return
	}
	own := *srv // the API as served to other nodes: no token, no forwarding
	d.cluster.agent.API = own.Handler("")
	f := &agent.Forwarder{Client: d.cluster.peers, Self: d.cfg.Node, Leader: d.leaderName, Log: d.log}
	srv.Forward = f.Forward
	if d.selfAPI != nil {
		d.cluster.agent.Self = d.selfAPI
		d.selfFwd.Store(f)
	}
}

// leaderName is the cluster's leader: this node while it leads, else the
// one the store names ("" during an election).
func (d *Daemon) leaderName(ctx context.Context) (string, error) {
	if d.lead.leading() {
		return d.cfg.Node, nil
	}
	return cluster.Leader(ctx, d.store)
}
