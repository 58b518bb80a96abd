package agent

import (
	"context"
	"errors"
	"net/http"
	"net/url"

	"github.com/shoal-run/shoal/internal/errdefs"
	"github.com/shoal-run/shoal/internal/httperr"
)

// AppVolumes is the apps' volumes on this node, as the leader removes
// those of an app removed with its volumes (shoal app rm --volumes): each
// node holds the volumes of the replicas it ran.
type AppVolumes interface {
	// RemoveApp removes the volumes of app, removed already.
	RemoveApp(ctx context.Context, app string) error
}

// volumeRoutes mounts this node's AppVolumes.
func (s *Server) volumeRoutes(mux *http.ServeMux) {
	mux.HandleFunc("DELETE "+Prefix+"volumes/{app}", func(w http.ResponseWriter, r *http.Request) {
		if s.Volumes == nil {
			httperr.WriteErr(w, errors.Join(errors.New("node "+s.Name+" serves no volumes"), errdefs.ErrUnavailable))
			return
		}
		s.done(w, s.Volumes.RemoveApp(r.Context(), r.PathValue("app")))
	})
}

// RemoveAppVolumes removes the volumes of app, removed already, on node.
func (c *Client) RemoveAppVolumes(ctx context.Context, node, app string) error {
	return c.call(ctx, node, http.MethodDelete, "volumes/"+url.PathEscape(app), nil, nil)
}
