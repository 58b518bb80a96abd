package api

import (
	"context"
	"net/http"

	"github.com/shoal-run/shoal/internal/api/types"
	"github.com/shoal-run/shoal/internal/httperr"
)

// Nodes is the cluster's membership as the API serves it.
type Nodes interface {
	List(ctx context.Context) ([]types.Node, error)
	Drain(ctx context.Context, name string) error
	Remove(ctx context.Context, name string) error
}

func (s *Server) nodeRoutes(mux *http.ServeMux) {
	if s.Nodes == nil {
		return
	}
	mux.HandleFunc("GET /v1/nodes", func(w http.ResponseWriter, r *http.Request) {
		nodes, err := s.Nodes.List(r.Context())
		if err != nil {
			httperr.WriteErr(w, err)
			return
		}
		httperr.WriteJSON(w, http.StatusOK, nodes)
	})
	mux.HandleFunc("POST /v1/nodes/{name}/drain", func(w http.ResponseWriter, r *http.Request) {
		if err := s.Nodes.Drain(r.Context(), r.PathValue("name")); err != nil {
			httperr.WriteErr(w, err)
			return
		}
		w.WriteHeader(http.StatusNoContent)
	})
	mux.HandleFunc("DELETE /v1/nodes/{name}", func(w http.ResponseWriter, r *http.Request) {
		if err := s.Nodes.Remove(r.Context(), r.PathValue("name")); err != nil {
			httperr.WriteErr(w, err)
			return
		}
		w.WriteHeader(http.StatusNoContent)
	})
}
