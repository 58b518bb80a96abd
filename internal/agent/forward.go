package agent

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"net/http/httputil"
	"strings"

	"github.com/shoal-run/shoal/internal/api"
	"github.com/shoal-run/shoal/internal/errdefs"
	"github.com/shoal-run/shoal/internal/httperr"
)

// apiPrefix is where a node serves the app requests other nodes forward to
// it: the request's own path follows (/v1/agent/api/v1/apps/...).
const apiPrefix = Prefix + "api"

// Forwarder sends the app requests a follower's API gets to the leader,
// so that apps are deployed and changed through any node. The user's API
// token (or the unix socket's permission) is checked where the request
// came in; the hop to the leader carries the cluster secret instead.
type Forwarder struct {
	Client *Client
	Self   string // this node's name
	// Leader returns the leader's name, "" while none is elected.
	Leader func(ctx context.Context) (string, error)
	Log    *slog.Logger
}

// Forward sends r to the leader and writes its answer to w, streamed as
// it comes, cut off (503 if nothing was written yet) should the leader
// leave the live set meanwhile; it returns false, having written nothing,
// when this node leads (the request is served here).
func (f *Forwarder) Forward(w http.ResponseWriter, r *http.Request) bool {
	return f.forward(w, r, apiPrefix, nil)
}

// forward sends r to the leader under prefix, with set's headers added to
// the hop (the cluster secret and the leader's name set after them).
func (f *Forwarder) forward(w http.ResponseWriter, r *http.Request, prefix string, set func(in *http.Request, out http.Header)) bool {
	ctx := r.Context()
	leader, err := f.Leader(ctx)
	if err != nil {
		httperr.WriteErr(w, fmt.Errorf("find the cluster's leader: %w", err))
		return true
	}
	if leader == "" {
		httperr.WriteErr(w, fmt.Errorf("the cluster has no leader yet (an election is under way): try again in a moment: %w", errdefs.ErrUnavailable))
		return true
	}
	if leader == f.Self {
		return false
	}
	addr, err := f.Client.Addr(ctx, leader)
	if err != nil {
		httperr.WriteErr(w, fmt.Errorf("leader %s: %w", leader, err))
		return true
	}
	f.Client.init()
	user := ctx // the user's request: its end is not the leader's failure
	rp := &httputil.ReverseProxy{
		Rewrite: func(pr *httputil.ProxyRequest) {
			u := pr.Out.URL
			u.Scheme, u.Host = "http", addr
			u.Path = prefix + pr.In.URL.Path
			if pr.In.URL.RawPath != "" {
				u.RawPath = prefix + pr.In.URL.RawPath
			}
			pr.Out.Host = addr
			pr.SetXForwarded()
			if set != nil {
				set(pr.In, pr.Out.Header)
			}
			pr.Out.Header.Set("Authorization", "Bearer "+f.Client.Secret)
			pr.Out.Header.Set(NodeHeader, leader)
		},
		Transport:     f.Client.HTTP.Transport,
		FlushInterval: -1, // logs and watches stream
		ErrorHandler: func(w http.ResponseWriter, r *http.Request, err error) {
			f.Client.forget(leader)
			if user.Err() != nil {
				return
			}
			if cause := context.Cause(r.Context()); r.Context().Err() != nil && cause != nil {
				err = cause // the leader left the live set
			}
			httperr.WriteErr(w, fmt.Errorf("leader %s at %s: %v: %w", leader, addr, err, errdefs.ErrUnavailable))
		},
	}
	if f.Log != nil {
		f.Log.Debug("forwarding a request to the leader", "leader", leader, "method", r.Method, "path", r.URL.Path)
	}
	lctx, release := f.Client.whileLive(ctx, leader)
	defer release()
	rp.ServeHTTP(w, r.WithContext(lctx))
	return true
}

// forwarded serves an app request another node forwarded: only app
// requests, with this node's own API handler.
func (s *Server) forwarded(w http.ResponseWriter, r *http.Request) {
	if s.API == nil {
		httperr.WriteErr(w, fmt.Errorf("node %s serves no API requests of other nodes: %w", s.Name, errdefs.ErrUnavailable))
		return
	}
	in := r.Clone(r.Context())
	in.URL.Path = strings.TrimPrefix(r.URL.Path, apiPrefix)
	in.URL.RawPath = strings.TrimPrefix(r.URL.RawPath, apiPrefix)
	in.RequestURI = ""
	if !api.IsAppRequest(in) {
		httperr.Write(w, http.StatusNotFound, errors.New("only app requests are forwarded between nodes, not "+in.Method+" "+in.URL.Path), "")
		return
	}
	s.API.ServeHTTP(w, in)
}
