package api

import (
	"errors"
	"net/http"

	"github.com/shoal-run/shoal/internal/httperr"
)

// activator is the part of Apps that wakes an app whose proxy holds
// requests for it: the proxy runs in a process of its own and calls the
// daemon back on this route.
type activator interface {
	Activate(app string)
}

// routeActivate serves POST /v1/apps/{name}/activate: 202 once the wake-up
// is queued (one for an app not loaded yet is kept for it: serving's wakes.go).
func (s *Server) routeActivate(mux *http.ServeMux) {
	mux.HandleFunc("POST /v1/apps/{name}/activate", func(w http.ResponseWriter, r *http.Request) {
		a, ok := s.Apps.(activator)
		if !ok {
			httperr.Write(w, http.StatusServiceUnavailable, errors.New("serving is not enabled on this daemon"), "")
			return
		}
		a.Activate(r.PathValue("name"))
		w.WriteHeader(http.StatusAccepted)
	})
}
