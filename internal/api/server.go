// Package api is shoal's HTTP JSON API server: it maps the requests of the
// v1 API onto the daemon's services and writes their answers, including the
// framed output stream of a container. The JSON types it speaks are in
// package types. It listens on a unix socket (0600, root) and optionally on
// TCP behind a bearer token.
package api

import (
	"context"
	"crypto/subtle"
	"errors"
	"io"
	"log/slog"
	"net/http"
	"strings"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"

	"github.com/shoal-run/shoal/internal/api/types"
	"github.com/shoal-run/shoal/internal/errdefs"
	"github.com/shoal-run/shoal/internal/httperr"
)

// Images is what the API needs of the image service.
type Images interface {
	List(ctx context.Context) ([]types.Image, error)
	Get(ctx context.Context, ref string) (types.Image, error)
	Build(ctx context.Context, req types.BuildRequest) (types.Image, error)
	Import(ctx context.Context, req types.ImportRequest) ([]types.Image, error)
	Pull(ctx context.Context, req types.PullRequest) (types.Image, error)
	Remove(ctx context.Context, ref string) error
}

// Containers is what the API needs of the container service. Run validates
// the request and starts the container; attach is called once, right before
// the container starts, and returns where its stdout and stderr go. An error
// returned before attach was called is reported as an HTTP error; after
// that, it is carried in the exit frame.
type Containers interface {
	Run(ctx context.Context, req types.RunRequest, attach func() (stdout, stderr io.Writer)) (types.Exit, error)
	List(ctx context.Context) ([]types.Container, error)
	Remove(ctx context.Context, id string) error
}

// Server serves the v1 API. It has one method per route (about 30),
// grouped by resource in files of their own (images and containers,
// apps, jobs, nodes); each is a thin HTTP edge over one of the services
// below, so splitting Server by resource would only repeat its fields.
type Server struct {
	Images     Images
	Containers Containers
	Apps       Apps    // nil: the app routes answer 503
	Events     Events  // nil: /v1/events answers 503
	Jobs       Jobs    // nil: no job routes
	Nodes      Nodes   // nil: no node routes
	Secrets    Secrets // nil: the secret routes answer 503
	Certs      Certs   // nil: /v1/certs answers 503
	Volumes    Volumes // nil: the volume routes answer 503
	Health     func(ctx context.Context) types.Health
	Registry   prometheus.Gatherer
	Logger     *slog.Logger
	// Forward, if set, may take an app request (under /v1/apps; the
	// proxy's wake-ups aside) once its token is checked, before this
	// daemon serves it: a follower of a cluster sends it to the leader.
	// It returns whether it took the request.
	Forward func(w http.ResponseWriter, r *http.Request) bool
}

// Handler returns the API handler. With a non-empty token every request but
// /v1/health must carry "Authorization: Bearer <token>".
func (s *Server) Handler(token string) http.Handler {
	mux := http.NewServeMux()
	mux.HandleFunc("GET /v1/health", s.health)
	mux.HandleFunc("GET /v1/images", s.listImages)
	mux.HandleFunc("GET /v1/images/{ref...}", s.getImage)
	mux.HandleFunc("DELETE /v1/images/{ref...}", s.removeImage)
	if token == "" {
		mux.HandleFunc("POST /v1/images/build", s.buildImage)
		mux.HandleFunc("POST /v1/images/import", s.importImage)
	} else {
		// Build and import read a path on the daemon's host as root: only
		// local clients on the unix socket (root, 0600) may name one.
		localOnly := func(w http.ResponseWriter, r *http.Request) {
			httperr.Write(w, http.StatusForbidden, errors.New("image build and import read paths on the daemon's host; use the unix socket on that host"), "")
		}
		mux.HandleFunc("POST /v1/images/build", localOnly)
		mux.HandleFunc("POST /v1/images/import", localOnly)
	}
	mux.HandleFunc("POST /v1/images/pull", s.pullImage)
	mux.HandleFunc("POST /v1/containers/run", s.runContainer)
	mux.HandleFunc("GET /v1/containers", s.listContainers)
	mux.HandleFunc("DELETE /v1/containers/{id}", s.removeContainer)
	s.routeApps(mux)
	s.routeSecrets(mux)
	s.routeCerts(mux)
	s.routeActivate(mux)
	s.registerJobs(mux)
	s.nodeRoutes(mux)
	s.routeVolumes(mux)
	if s.Registry != nil {
		mux.Handle("GET /metrics", promhttp.HandlerFor(s.Registry, promhttp.HandlerOpts{}))
	}
	mux.HandleFunc("/", func(w http.ResponseWriter, r *http.Request) {
		var allow []string
		for _, m := range []string{"GET", "POST", "PUT", "DELETE"} {
			probe := r.Clone(r.Context())
			probe.Method = m
			if _, pattern := mux.Handler(probe); pattern != "/" {
				allow = append(allow, m)
			}
		}
		if len(allow) > 0 {
			w.Header().Set("Allow", strings.Join(allow, ", "))
			httperr.Write(w, http.StatusMethodNotAllowed, errors.New("method "+r.Method+" not allowed on "+r.URL.Path+"; use "+strings.Join(allow, " or ")), "")
			return
		}
		httperr.Write(w, http.StatusNotFound, errors.New("no such endpoint: "+r.Method+" "+r.URL.Path), "")
	})
	var h http.Handler = mux
	if s.Forward != nil {
		h = http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			if IsAppRequest(r) && s.Forward(w, r) {
				return
			}
			mux.ServeHTTP(w, r)
		})
	}
	if token == "" {
		return h
	}
	want := []byte("Bearer " + token)
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path != "/v1/health" && subtle.ConstantTimeCompare([]byte(r.Header.Get("Authorization")), want) != 1 {
			s.log().Warn("api: refused request without a valid token", "remote", r.RemoteAddr, "path", r.URL.Path)
			httperr.Write(w, http.StatusUnauthorized, errors.New("missing or wrong bearer token"), "")
			return
		}
		h.ServeHTTP(w, r)
	})
}

// IsAppRequest reports whether r is a request of the apps API (/v1/apps
// and under it) other than the proxy's wake-up of an app.
func IsAppRequest(r *http.Request) bool {
	p := r.URL.Path
	if p != "/v1/apps" && !strings.HasPrefix(p, "/v1/apps/") {
		return false
	}
	return !(r.Method == http.MethodPost && strings.HasSuffix(p, "/activate"))
}

func (s *Server) log() *slog.Logger {
	if s.Logger != nil {
		return s.Logger
	}
	return slog.Default()
}

func (s *Server) fail(w http.ResponseWriter, r *http.Request, err error) {
	code := httperr.Status(err)
	if code >= 500 {
		s.log().Error("api request failed", "method", r.Method, "path", r.URL.Path, "err", err)
	}
	httperr.Write(w, code, err, errdefs.Field(err))
}

// MaxBody bounds the JSON body of every request but a job submission.
const MaxBody = 1 << 20

// decode reads a JSON body of at most MaxBody bytes into v strictly (see
// httperr.DecodeJSON).
func decode(w http.ResponseWriter, r *http.Request, v any) error {
	return httperr.ReadJSON(w, r, MaxBody, v)
}

func (s *Server) health(w http.ResponseWriter, r *http.Request) {
	httperr.WriteJSON(w, http.StatusOK, s.Health(r.Context()))
}
