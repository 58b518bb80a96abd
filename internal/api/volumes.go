package api

import (
	"context"
	"errors"
	"io"
	"net/http"
	"strconv"

	"github.com/shoal-run/shoal/internal/api/types"
	"github.com/shoal-run/shoal/internal/errdefs"
	"github.com/shoal-run/shoal/internal/httperr"
)

// Volumes is the apps' volumes on this node (see internal/volume).
type Volumes interface {
	List(ctx context.Context) ([]types.Volume, error)
	Remove(ctx context.Context, app, name string) error
	// Prune removes the volumes of app, deployed, that it does not use,
	// and names them.
	Prune(ctx context.Context, app string) ([]string, error)
	// RemoveApp removes the volumes of app, removed already.
	RemoveApp(ctx context.Context, app string) error
	Stat(ctx context.Context, app, name, path string) (types.VolumePathStat, error)
	// Export writes path of a volume as a tar.
	Export(ctx context.Context, app, name, path string, w io.Writer) error
	// Import unpacks a tar into directory path of a volume, all or
	// nothing: refused when its files hold more than limit bytes (0: the
	// service's default).
	Import(ctx context.Context, app, name, path string, r io.Reader, limit int64) error
}

// routeVolumes registers the volume routes; without a Volumes service
// they answer 503.
func (s *Server) routeVolumes(mux *http.ServeMux) {
	vols := func(h func(w http.ResponseWriter, r *http.Request, app, name string)) http.HandlerFunc {
		return func(w http.ResponseWriter, r *http.Request) {
			if s.Volumes == nil {
				httperr.Write(w, http.StatusServiceUnavailable, errors.New("volumes are not served by this daemon"), "")
				return
			}
			h(w, r, r.PathValue("app"), r.PathValue("name"))
		}
	}
	mux.HandleFunc("GET /v1/volumes", vols(func(w http.ResponseWriter, r *http.Request, _, _ string) {
		list, err := s.Volumes.List(r.Context())
		if err != nil {
			s.fail(w, r, err)
			return
		}
		httperr.WriteJSON(w, http.StatusOK, list)
	}))
	mux.HandleFunc("DELETE /v1/volumes/{app}/{name}", vols(func(w http.ResponseWriter, r *http.Request, app, name string) {
		if err := s.Volumes.Remove(r.Context(), app, name); err != nil {
			s.fail(w, r, err)
			return
		}
		w.WriteHeader(http.StatusNoContent)
	}))
	mux.HandleFunc("POST /v1/volumes/{app}/prune", vols(func(w http.ResponseWriter, r *http.Request, app, _ string) {
		pruned, err := s.Volumes.Prune(r.Context(), app)
		if err != nil {
			s.fail(w, r, err)
			return
		}
		httperr.WriteJSON(w, http.StatusOK, types.PruneVolumes{App: app, Removed: pruned})
	}))
	mux.HandleFunc("GET /v1/volumes/{app}/{name}/stat", vols(func(w http.ResponseWriter, r *http.Request, app, name string) {
		st, err := s.Volumes.Stat(r.Context(), app, name, r.URL.Query().Get("path"))
		if err != nil {
			s.fail(w, r, err)
			return
		}
		httperr.WriteJSON(w, http.StatusOK, st)
	}))
	mux.HandleFunc("GET /v1/volumes/{app}/{name}/archive", vols(func(w http.ResponseWriter, r *http.Request, app, name string) {
		p := r.URL.Query().Get("path")
		if _, err := s.Volumes.Stat(r.Context(), app, name, p); err != nil {
			s.fail(w, r, err)
			return
		}
		w.Header().Set("Content-Type", "application/x-tar")
		w.Header().Set("Trailer", types.VolumeTarError)
		ew := &errWriter{w: w}
		if err := s.Volumes.Export(r.Context(), app, name, p, ew); err != nil {
			if !ew.wrote {
				s.fail(w, r, err)
				return
			}
			w.Header().Set(types.VolumeTarError, err.Error())
		}
	}))
	mux.HandleFunc("PUT /v1/volumes/{app}/{name}/archive", vols(func(w http.ResponseWriter, r *http.Request, app, name string) {
		var limit int64
		if v := r.URL.Query().Get("max_bytes"); v != "" {
			n, err := strconv.ParseInt(v, 10, 64)
			if err != nil || n <= 0 {
				s.fail(w, r, errdefs.Invalid("max_bytes", "%q is not a positive number of bytes", v))
				return
			}
			limit = n
		}
		if err := s.Volumes.Import(r.Context(), app, name, r.URL.Query().Get("path"), r.Body, limit); err != nil {
			s.fail(w, r, err)
			return
		}
		w.WriteHeader(http.StatusNoContent)
	}))
}

// errWriter tells whether anything was written.
type errWriter struct {
	w     io.Writer
	wrote bool
}

func (e *errWriter) Write(b []byte) (int, error) {
	e.wrote = true
	return e.w.Write(b)
}
