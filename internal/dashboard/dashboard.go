// Package dashboard is the daemon's web page for operators (`shoal daemon
// --ui ADDR`): apps with their replicas, revisions and traffic split, charts
// of requests per second, concurrency, replicas and CPU quota over the last
// minutes, the event log as it grows, the job queue by tenant, and the
// certificates the proxy serves with their expiry and last renewal error.
//
// The daemon's state is sampled every second into bounded histories (a ring
// of Options.History points per app) through the small interfaces below.
// Pages are rendered on the server with html/template, charts as inline
// SVG; a page keeps itself current through one server-sent event stream
// (/stream) that carries the re-rendered sections after each sample and the
// events as they are logged. The few lines of script and the style sheet
// are embedded in the binary: the page needs nothing from elsewhere.
//
// Access takes the TCP API's bearer token: as an Authorization header, or
// once as ?token= on any page, which sets an HttpOnly cookie holding a
// digest of the token (not the token) and redirects to the same page
// without it.
package dashboard

import (
	"context"
	"encoding/json"
	"log/slog"
	"net/http"
	"time"

	"github.com/shoal-run/shoal/internal/api/types"
	"github.com/shoal-run/shoal/internal/clock"
	"github.com/shoal-run/shoal/internal/route"
)

// Apps lists the apps with their replicas (the serving manager).
type Apps interface {
	List(ctx context.Context) ([]types.App, error)
}

// Loads reads an app's proxy counters (the proxy's control client).
type Loads interface {
	Load(app string) route.Load
}

// Events is the event log.
type Events interface {
	List(ctx context.Context, after int64, app string) ([]types.Event, error)
	Watch(ctx context.Context, after int64, app string) (<-chan types.Event, error)
}

// Tenant is one tenant's jobs.
type Tenant struct {
	Name    string `json:"name"`
	Queued  int    `json:"queued"`
	Running int    `json:"running"`
}

// JobStats counts the jobs of every tenant.
type JobStats struct {
	Queued  int `json:"queued"`
	Running int `json:"running"`
	Slots   int `json:"slots"`
}

// Jobs reads the job queue.
type Jobs interface {
	Stats() JobStats
	Tenants() []Tenant
}

// Nodes lists the cluster's nodes.
type Nodes interface {
	List(ctx context.Context) ([]types.Node, error)
}

// Certs lists the certificates the proxy serves (never a key).
type Certs interface {
	List(ctx context.Context) ([]types.Cert, error)
}

// Options configure a Dashboard. Any of Apps, Loads, Events and Jobs may
// be nil: its part of the page is then empty. Nodes is nil on a single
// host: the page then has no nodes section.
type Options struct {
	Apps   Apps
	Loads  Loads
	Events Events
	Jobs   Jobs
	Nodes  Nodes
	Certs  Certs // nil: the certificates section says none
	// Token is the bearer token that opens the page; it must not be empty.
	Token string
	// Interval is the time between samples (default a second) and History
	// the number of samples kept per app (default 600).
	Interval time.Duration
	History  int
	Clock    clock.Clock
	Logger   *slog.Logger
}

// Dashboard serves the page and samples the daemon's state.
type Dashboard struct {
	o       Options
	s       *sampler
	auth    auth
	handler http.Handler
	render  *renderCache
	done    chan struct{} // closed when Run returns: streams end
}

// New returns a dashboard; Run samples, Handler serves.
func New(o Options) *Dashboard {
	if o.Interval <= 0 {
		o.Interval = time.Second
	}
	if o.History <= 0 {
		o.History = 600
	}
	if o.Clock == nil {
		o.Clock = clock.Real{}
	}
	if o.Logger == nil {
		o.Logger = slog.Default()
	}
	d := &Dashboard{o: o, s: newSampler(o), auth: newAuth(o.Token)}
	d.render = &renderCache{}
	d.done = make(chan struct{})
	d.handler = d.routes()
	return d
}

// Run samples the daemon's state every Interval until ctx ends.
func (d *Dashboard) Run(ctx context.Context) {
	defer close(d.done)
	d.s.run(ctx)
}

// Handler serves the page, its assets and its event stream.
func (d *Dashboard) Handler() http.Handler { return d.handler }

func (d *Dashboard) routes() http.Handler {
	mux := http.NewServeMux()
	mux.HandleFunc("GET /{$}", d.page)
	mux.HandleFunc("GET /stream", d.stream)
	mux.HandleFunc("GET /state.json", d.stateJSON)
	mux.Handle("GET /static/", http.StripPrefix("/static/", staticFiles()))
	return d.auth.wrap(secure(mux), d.o.Logger)
}

// secure sets the headers every answer carries: the page loads nothing but
// its own files, cannot be framed, and sends no referrer.
func secure(h http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		hd := w.Header()
		hd.Set("Content-Security-Policy", "default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self' data:; connect-src 'self'; frame-ancestors 'none'; base-uri 'none'; form-action 'self'")
		hd.Set("X-Content-Type-Options", "nosniff")
		hd.Set("Referrer-Policy", "no-referrer")
		hd.Set("Cache-Control", "no-store")
		h.ServeHTTP(w, r)
	})
}

func (d *Dashboard) stateJSON(w http.ResponseWriter, r *http.Request) {
	snap, _ := d.s.snapshot()
	w.Header().Set("Content-Type", "application/json")
	json.NewEncoder(w).Encode(snap)
}
