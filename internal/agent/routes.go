package agent

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"net/url"
	"strconv"

	"github.com/shoal-run/shoal/internal/httperr"
	"github.com/shoal-run/shoal/internal/route"
)

// Routing is what the nodes ask of each other's routing (internal/routes,
// and serving's wake-up on the leader).
type Routing interface {
	// Activate wakes an app (on the leader).
	Activate(app string)
	// Report takes a follower's per-app proxy load (on the leader).
	Report(node string, loads map[string]route.Load)
	// WaitApplied returns once the node has applied the routes up to seq
	// and its proxy has no request in flight on the endpoint.
	WaitApplied(ctx context.Context, endpointID string, seq int64) error
}

// maxLoadBody bounds a load report.
const maxLoadBody = 16 << 20

// routing mounts the routing calls:
//
//	POST /v1/agent/routes/activate/{app}       202 once the wake-up is queued
//	PUT  /v1/agent/routes/load/{node}          a follower's loads (map app → route.Load)
//	POST /v1/agent/routes/wait-idle/{endpoint}?seq=N  204 once idle here
func (s *Server) routing(mux *http.ServeMux) {
	mux.HandleFunc("POST "+Prefix+"routes/activate/{app}", func(w http.ResponseWriter, r *http.Request) {
		if !s.hasRouting(w) {
			return
		}
		s.Routing.Activate(r.PathValue("app"))
		w.WriteHeader(http.StatusAccepted)
	})
	mux.HandleFunc("PUT "+Prefix+"routes/load/{node}", func(w http.ResponseWriter, r *http.Request) {
		if !s.hasRouting(w) {
			return
		}
		var loads map[string]route.Load
		if err := json.NewDecoder(http.MaxBytesReader(w, r.Body, maxLoadBody)).Decode(&loads); err != nil {
			httperr.Write(w, http.StatusBadRequest, fmt.Errorf("load report: %w", err), "body")
			return
		}
		s.Routing.Report(r.PathValue("node"), loads)
		w.WriteHeader(http.StatusNoContent)
	})
	mux.HandleFunc("POST "+Prefix+"routes/wait-idle/{endpoint}", func(w http.ResponseWriter, r *http.Request) {
		if !s.hasRouting(w) {
			return
		}
		seq, err := strconv.ParseInt(r.URL.Query().Get("seq"), 10, 64)
		if err != nil {
			httperr.Write(w, http.StatusBadRequest, fmt.Errorf("seq %q is not a number", r.URL.Query().Get("seq")), "seq")
			return
		}
		if err := s.Routing.WaitApplied(r.Context(), r.PathValue("endpoint"), seq); err != nil {
			httperr.Write(w, httperr.Status(err), err, "")
			return
		}
		w.WriteHeader(http.StatusNoContent)
	})
}

func (s *Server) hasRouting(w http.ResponseWriter) bool {
	if s.Routing == nil {
		httperr.Write(w, http.StatusServiceUnavailable, errors.New("this node routes no apps"), "")
		return false
	}
	return true
}

// Activate asks node (the leader) to wake app.
func (c *Client) Activate(ctx context.Context, node, app string) error {
	return c.call(ctx, node, http.MethodPost, "routes/activate/"+url.PathEscape(app), nil, nil)
}

// ReportLoad sends node (the leader) the per-app proxy load of node from.
func (c *Client) ReportLoad(ctx context.Context, node, from string, loads map[string]route.Load) error {
	return c.call(ctx, node, http.MethodPut, "routes/load/"+url.PathEscape(from), loads, nil)
}

// WaitIdle returns once node has applied the routes up to seq and its
// proxy has no request in flight on the endpoint, or with ctx's error.
func (c *Client) WaitIdle(ctx context.Context, node, endpointID string, seq int64) error {
	return c.call(ctx, node, http.MethodPost, "routes/wait-idle/"+url.PathEscape(endpointID)+"?seq="+strconv.FormatInt(seq, 10), nil, nil)
}
