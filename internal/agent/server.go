package agent

import (
	"fmt"
	"log/slog"
	"net/http"
	"time"

	"github.com/shoal-run/shoal/internal/httperr"
	"github.com/shoal-run/shoal/internal/node"
)

// Server answers the other nodes of the cluster. Its handler authenticates
// every request with the cluster secret before any route sees it.
type Server struct {
	Name   string // this node's name
	Secret string
	// Node is this node's own replicas (localnode's Node), which the
	// leader drives through the replica routes; nil: they answer 503.
	Node node.Node
	// WaitPoll bounds how long a Wait is held before the answer that the
	// replica still runs (0: DefaultWaitPoll).
	WaitPoll time.Duration
	// API serves the app requests a follower forwards to this node (the
	// leader): the daemon's API handler without a token or forwarding of
	// its own; nil: they answer 503.
	API http.Handler
	// Self serves the self API calls replicas on other nodes make there
	// and their nodes relay to this node (the leader): the self API's own
	// handler; nil: they answer 503.
	Self http.Handler
	// Blobs is this node's image store, served read only under /v2/ by
	// Registry; nil: it answers 503.
	Blobs Blobs
	// Fetch gets a replica's image from another node before Start when
	// this node lacks it; nil: Start runs with what is here.
	Fetch *Fetcher
	// Routing answers the routing calls; nil: they answer 503.
	Routing Routing
	// Volumes is this node's apps' volumes; nil: their removal answers 503.
	Volumes AppVolumes
	Log     *slog.Logger
}

// Handler returns the agent's routes, all under Prefix, behind the
// cluster secret.
func (s *Server) Handler() http.Handler {
	if s.Log == nil {
		s.Log = discard()
	}
	mux := http.NewServeMux()
	mux.HandleFunc("GET "+Prefix+"ping", s.ping)
	s.routing(mux)
	s.replicaRoutes(mux)
	s.volumeRoutes(mux)
	mux.HandleFunc(apiPrefix+"/", s.forwarded)
	mux.HandleFunc(selfPrefix+"/", s.relayedSelf)
	return guard(s.Secret, s.Log, s.addressed(mux))
}

// addressed refuses a request meant for another node (421): the caller's
// address for that node is out of date.
func (s *Server) addressed(h http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if to := r.Header.Get(NodeHeader); to != "" && to != s.Name {
			httperr.Write(w, http.StatusMisdirectedRequest, fmt.Errorf("this is node %s, not %s", s.Name, to), "")
			return
		}
		h.ServeHTTP(w, r)
	})
}

func (s *Server) ping(w http.ResponseWriter, r *http.Request) {
	httperr.WriteJSON(w, http.StatusOK, Pong{Node: s.Name, Time: time.Now().UTC()})
}

func discard() *slog.Logger { return slog.New(slog.DiscardHandler) }
