package api

import (
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/shoal-run/shoal/internal/api/types"
	"github.com/shoal-run/shoal/internal/errdefs"
	"github.com/shoal-run/shoal/internal/httperr"
)

// sseKeepAlive is how often an idle event stream gets a comment line, so
// that proxies and clients see the connection is alive.
const sseKeepAlive = 15 * time.Second

// routeApps registers the app and event routes. Without an Apps (or Events)
// service they answer 503.
func (s *Server) routeApps(mux *http.ServeMux) {
	apps := func(h http.HandlerFunc) http.HandlerFunc {
		return func(w http.ResponseWriter, r *http.Request) {
			if s.Apps == nil {
				httperr.Write(w, http.StatusServiceUnavailable, errors.New("serving is not enabled on this daemon"), "")
				return
			}
			h(w, r)
		}
	}
	mux.HandleFunc("POST /v1/apps", apps(s.deployApp))
	mux.HandleFunc("GET /v1/apps", apps(s.listApps))
	mux.HandleFunc("GET /v1/apps/{name}", apps(s.getApp))
	mux.HandleFunc("DELETE /v1/apps/{name}", apps(s.removeApp))
	mux.HandleFunc("POST /v1/apps/{name}/scale", apps(s.scaleApp))
	mux.HandleFunc("GET /v1/apps/{name}/logs", apps(s.appLogs))
	mux.HandleFunc("POST /v1/apps/{name}/rollback", apps(s.rollbackApp))
	mux.HandleFunc("PUT /v1/apps/{name}/traffic", apps(s.appTraffic))
	mux.HandleFunc("GET /v1/events", func(w http.ResponseWriter, r *http.Request) {
		if s.Events == nil {
			httperr.Write(w, http.StatusServiceUnavailable, errors.New("serving is not enabled on this daemon: no event log"), "")
			return
		}
		s.events(w, r)
	})
}

func (s *Server) deployApp(w http.ResponseWriter, r *http.Request) {
	var req types.DeployRequest
	if err := decode(w, r, &req); err != nil {
		s.fail(w, r, err)
		return
	}
	if strings.TrimSpace(req.Manifest) == "" {
		s.fail(w, r, errdefs.Invalid("manifest", "empty: send the text of a shoal.toml"))
		return
	}
	app, err := s.Apps.Deploy(r.Context(), req)
	if err != nil {
		s.fail(w, r, err)
		return
	}
	httperr.WriteJSON(w, http.StatusCreated, app)
}

func (s *Server) listApps(w http.ResponseWriter, r *http.Request) {
	page, err := appPage(r)
	if err != nil {
		s.fail(w, r, err)
		return
	}
	apps, err := s.Apps.List(r.Context())
	if err != nil {
		s.fail(w, r, err)
		return
	}
	sort.SliceStable(apps, func(i, j int) bool { return apps[i].Name < apps[j].Name })
	apps = page.Of(apps)
	if apps == nil {
		apps = []types.App{}
	}
	httperr.WriteJSON(w, http.StatusOK, apps)
}

// appPage reads GET /v1/apps's ?limit=, ?after= and ?state=.
func appPage(r *http.Request) (types.AppPage, error) {
	q := r.URL.Query()
	p := types.AppPage{After: q.Get("after"), State: q.Get("state")}
	if v := q.Get("limit"); v != "" {
		n, err := strconv.Atoi(v)
		if err != nil || n < 1 {
			return p, errdefs.Invalid("limit", "must be a whole number from 1 to %d, got %q", types.MaxAppPage, v)
		}
		p.Limit = n
	}
	if field, err := p.Check(); err != nil {
		return p, errdefs.Invalid(field, "%v", err)
	}
	return p, nil
}

func (s *Server) getApp(w http.ResponseWriter, r *http.Request) {
	app, err := s.Apps.Get(r.Context(), r.PathValue("name"))
	if err != nil {
		s.fail(w, r, err)
		return
	}
	httperr.WriteJSON(w, http.StatusOK, app)
}

// removeApp removes an app; its volumes on this node go with it only with
// ?volumes=true.
func (s *Server) removeApp(w http.ResponseWriter, r *http.Request) {
	name := r.PathValue("name")
	withVolumes := r.URL.Query().Get("volumes") == "true"
	if withVolumes && s.Volumes == nil {
		httperr.Write(w, http.StatusServiceUnavailable, errors.New("volumes are not served by this daemon"), "")
		return
	}
	if err := s.Apps.Remove(r.Context(), name); err != nil {
		s.fail(w, r, err)
		return
	}
	if withVolumes {
		if err := s.Volumes.RemoveApp(r.Context(), name); err != nil {
			s.fail(w, r, err)
			return
		}
	}
	w.WriteHeader(http.StatusNoContent)
}

func (s *Server) scaleApp(w http.ResponseWriter, r *http.Request) {
	var req types.ScaleRequest
	if err := decode(w, r, &req); err != nil {
		s.fail(w, r, err)
		return
	}
	if req.Min == nil && req.Max == nil {
		s.fail(w, r, errdefs.Invalid("min", "give min, max or both"))
		return
	}
	app, err := s.Apps.Scale(r.Context(), r.PathValue("name"), req)
	if err != nil {
		s.fail(w, r, err)
		return
	}
	httperr.WriteJSON(w, http.StatusOK, app)
}

func (s *Server) rollbackApp(w http.ResponseWriter, r *http.Request) {
	var req types.RollbackRequest
	if r.ContentLength != 0 {
		if err := decode(w, r, &req); err != nil {
			s.fail(w, r, err)
			return
		}
	}
	if req.To < 0 {
		s.fail(w, r, errdefs.Invalid("to", "%d must be a revision number (1 or more), or 0 for the one before the current", req.To))
		return
	}
	app, err := s.Apps.Rollback(r.Context(), r.PathValue("name"), req)
	if err != nil {
		s.fail(w, r, err)
		return
	}
	httperr.WriteJSON(w, http.StatusOK, app)
}

func (s *Server) appTraffic(w http.ResponseWriter, r *http.Request) {
	var req types.TrafficRequest
	if err := decode(w, r, &req); err != nil {
		s.fail(w, r, err)
		return
	}
	if len(req.Traffic) == 0 {
		s.fail(w, r, errdefs.Invalid("traffic", "give each revision's percent, e.g. [{\"revision\":3,\"percent\":90},{\"revision\":4,\"percent\":10}]"))
		return
	}
	app, err := s.Apps.SetTraffic(r.Context(), r.PathValue("name"), req)
	if err != nil {
		s.fail(w, r, err)
		return
	}
	httperr.WriteJSON(w, http.StatusOK, app)
}

// countingWriter remembers whether anything was written, so an error before
// the first byte is still an HTTP error.
type countingWriter struct {
	w http.ResponseWriter
	n int64
}

func (c *countingWriter) Write(p []byte) (int, error) {
	if c.n == 0 && len(p) > 0 {
		c.w.Header().Set("Content-Type", "text/plain; charset=utf-8")
		c.w.Header().Set("X-Content-Type-Options", "nosniff")
	}
	n, err := c.w.Write(p)
	c.n += int64(n)
	return n, err
}

// Flush sends what was written, the headers at least.
func (c *countingWriter) Flush() {
	if c.n == 0 {
		c.w.Header().Set("Content-Type", "text/plain; charset=utf-8")
		c.w.Header().Set("X-Content-Type-Options", "nosniff")
	}
	if f, ok := c.w.(http.Flusher); ok {
		f.Flush()
	}
}

func (s *Server) appLogs(w http.ResponseWriter, r *http.Request) {
	req, err := logsRequest(r, time.Now())
	if err != nil {
		s.fail(w, r, err)
		return
	}
	cw := &countingWriter{w: w}
	if err := s.Apps.Logs(r.Context(), r.PathValue("name"), req, cw); err != nil {
		if cw.n == 0 {
			s.fail(w, r, err)
			return
		}
		s.log().Warn("api: app logs cut short", "app", r.PathValue("name"), "err", err)
		return
	}
	if cw.n == 0 {
		w.Header().Set("Content-Type", "text/plain; charset=utf-8")
		w.WriteHeader(http.StatusOK)
	}
}

// logsRequest reads the query of GET /v1/apps/{name}/logs: tail, since (a
// duration before now, or an RFC 3339 time), replica, follow, timestamps.
func logsRequest(r *http.Request, now time.Time) (types.LogsRequest, error) {
	var req types.LogsRequest
	tail, err := intParam(r, "tail")
	if err != nil {
		return req, err
	}
	req.Tail = int(tail)
	if req.Since, err = types.ParseSince(r.URL.Query().Get("since"), now); err != nil {
		return req, errdefs.Invalid("since", "%v", err)
	}
	req.Replica = r.URL.Query().Get("replica")
	if req.Follow, err = boolParam(r, "follow"); err != nil {
		return req, err
	}
	req.Timestamps, err = boolParam(r, "timestamps")
	return req, err
}

// intParam reads a query parameter that must be a whole number ≥ 0 (0 when
// missing).
func intParam(r *http.Request, name string) (int64, error) {
	v := r.URL.Query().Get(name)
	if v == "" {
		return 0, nil
	}
	n, err := strconv.ParseInt(v, 10, 64)
	if err != nil || n < 0 {
		return 0, errdefs.Invalid(name, "%q must be a whole number, 0 or more", v)
	}
	return n, nil
}

// wantsStream reports whether the client asked for a server-sent event
// stream: Accept: text/event-stream, or ?follow=true.
func wantsStream(r *http.Request) (bool, error) {
	if f := r.URL.Query().Get("follow"); f != "" {
		b, err := strconv.ParseBool(f)
		if err != nil {
			return false, errdefs.Invalid("follow", "%q must be true or false", f)
		}
		if b {
			return true, nil
		}
	}
	for _, a := range r.Header.Values("Accept") {
		if strings.Contains(a, "text/event-stream") {
			return true, nil
		}
	}
	return false, nil
}

func (s *Server) events(w http.ResponseWriter, r *http.Request) {
	after, err := intParam(r, "after")
	if err != nil {
		s.fail(w, r, err)
		return
	}
	app := r.URL.Query().Get("app")
	stream, err := wantsStream(r)
	if err != nil {
		s.fail(w, r, err)
		return
	}
	if !stream {
		evs, err := s.Events.List(r.Context(), after, app)
		if err != nil {
			s.fail(w, r, err)
			return
		}
		if evs == nil {
			evs = []types.Event{}
		}
		httperr.WriteJSON(w, http.StatusOK, evs)
		return
	}
	// A reconnecting EventSource resumes after the last id it saw.
	if id := r.Header.Get("Last-Event-ID"); id != "" && r.URL.Query().Get("after") == "" {
		if n, err := strconv.ParseInt(id, 10, 64); err == nil && n > 0 {
			after = n
		}
	}
	ch, err := s.Events.Watch(r.Context(), after, app)
	if err != nil {
		s.fail(w, r, err)
		return
	}
	flusher, _ := w.(http.Flusher)
	h := w.Header()
	h.Set("Content-Type", "text/event-stream")
	h.Set("Cache-Control", "no-cache")
	h.Set("X-Accel-Buffering", "no")
	w.WriteHeader(http.StatusOK)
	fmt.Fprint(w, ": shoal event stream\n\n")
	if flusher != nil {
		flusher.Flush()
	}
	tick := time.NewTicker(sseKeepAlive)
	defer tick.Stop()
	for {
		select {
		case e, ok := <-ch:
			if !ok {
				return
			}
			b, err := json.Marshal(e)
			if err != nil {
				s.log().Error("api: event not encodable", "seq", e.Seq, "err", err)
				continue
			}
			if _, err := fmt.Fprintf(w, "id: %d\ndata: %s\n\n", e.Seq, b); err != nil {
				return
			}
		case <-tick.C:
			if _, err := fmt.Fprint(w, ": keep-alive\n\n"); err != nil {
				return
			}
		case <-r.Context().Done():
			return
		}
		if flusher != nil {
			flusher.Flush()
		}
	}
}
