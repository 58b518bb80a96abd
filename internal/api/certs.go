package api

import (
	"context"
	"errors"
	"net/http"

	"github.com/shoal-run/shoal/internal/api/types"
	"github.com/shoal-run/shoal/internal/httperr"
)

// Certs is what the API needs of the certificates the proxy serves: keys
// go in, never out.
type Certs interface {
	List(ctx context.Context) ([]types.Cert, error)
	Add(ctx context.Context, req types.CertRequest) (types.Cert, error)
	Remove(ctx context.Context, domain string) error
}

// Demander is a Certs service that orders certificates on demand (ACME):
// a TLS handshake asked for domain, which no certificate serves.
type Demander interface {
	Demand(ctx context.Context, domain string) error
}

// routeCerts registers /v1/certs; without a Certs service it answers 503.
func (s *Server) routeCerts(mux *http.ServeMux) {
	on := func(h http.HandlerFunc) http.HandlerFunc {
		return func(w http.ResponseWriter, r *http.Request) {
			if s.Certs == nil {
				httperr.Write(w, http.StatusServiceUnavailable, errors.New("certificates are not enabled on this daemon"), "")
				return
			}
			h(w, r)
		}
	}
	mux.HandleFunc("GET /v1/certs", on(func(w http.ResponseWriter, r *http.Request) {
		list, err := s.Certs.List(r.Context())
		if err != nil {
			s.fail(w, r, err)
			return
		}
		if list == nil {
			list = []types.Cert{}
		}
		httperr.WriteJSON(w, http.StatusOK, list)
	}))
	mux.HandleFunc("POST /v1/certs", on(func(w http.ResponseWriter, r *http.Request) {
		var req types.CertRequest
		if err := decode(w, r, &req); err != nil {
			s.fail(w, r, err)
			return
		}
		c, err := s.Certs.Add(r.Context(), req)
		if err != nil {
			s.fail(w, r, err)
			return
		}
		httperr.WriteJSON(w, http.StatusCreated, c)
	}))
	mux.HandleFunc("POST /v1/certs/{domain}/demand", on(func(w http.ResponseWriter, r *http.Request) {
		d, ok := s.Certs.(Demander)
		if !ok {
			httperr.Write(w, http.StatusConflict, errors.New("certificates on demand need ACME (--acme-ca)"), "domain")
			return
		}
		if err := d.Demand(r.Context(), r.PathValue("domain")); err != nil {
			s.fail(w, r, err)
			return
		}
		w.WriteHeader(http.StatusAccepted)
	}))
	mux.HandleFunc("DELETE /v1/certs/{domain}", on(func(w http.ResponseWriter, r *http.Request) {
		if err := s.Certs.Remove(r.Context(), r.PathValue("domain")); err != nil {
			s.fail(w, r, err)
			return
		}
		w.WriteHeader(http.StatusNoContent)
	}))
}
