package api

import (
	"context"
	"errors"
	"net/http"

	"github.com/shoal-run/shoal/internal/api/types"
	"github.com/shoal-run/shoal/internal/httperr"
)

// Secrets is what the API needs of apps' secrets: values go in, never out.
type Secrets interface {
	List(ctx context.Context, app string) ([]types.Secret, error)
	Set(ctx context.Context, app, name string, value []byte) (types.Secret, error)
	Delete(ctx context.Context, app, name string) error
}

// routeSecrets registers an app's secrets; without a Secrets service they
// answer 503.
func (s *Server) routeSecrets(mux *http.ServeMux) {
	on := func(h http.HandlerFunc) http.HandlerFunc {
		return func(w http.ResponseWriter, r *http.Request) {
			if s.Secrets == nil {
				httperr.Write(w, http.StatusServiceUnavailable, errors.New("secrets are not enabled on this daemon"), "")
				return
			}
			h(w, r)
		}
	}
	mux.HandleFunc("GET /v1/apps/{name}/secrets", on(func(w http.ResponseWriter, r *http.Request) {
		list, err := s.Secrets.List(r.Context(), r.PathValue("name"))
		if err != nil {
			s.fail(w, r, err)
			return
		}
		if list == nil {
			list = []types.Secret{}
		}
		httperr.WriteJSON(w, http.StatusOK, list)
	}))
	mux.HandleFunc("PUT /v1/apps/{name}/secrets/{secret}", on(func(w http.ResponseWriter, r *http.Request) {
		var req types.SecretRequest
		if err := decode(w, r, &req); err != nil {
			s.fail(w, r, err)
			return
		}
		info, err := s.Secrets.Set(r.Context(), r.PathValue("name"), r.PathValue("secret"), req.Value)
		if err != nil {
			s.fail(w, r, err)
			return
		}
		httperr.WriteJSON(w, http.StatusOK, info)
	}))
	mux.HandleFunc("DELETE /v1/apps/{name}/secrets/{secret}", on(func(w http.ResponseWriter, r *http.Request) {
		if err := s.Secrets.Delete(r.Context(), r.PathValue("name"), r.PathValue("secret")); err != nil {
			s.fail(w, r, err)
			return
		}
		w.WriteHeader(http.StatusNoContent)
	}))
}
