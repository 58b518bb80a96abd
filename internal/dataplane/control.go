// Package dataplane runs shoal's HTTP proxy (internal/proxy) in a process
// of its own, so that the daemon, the control plane, may crash and restart
// while requests keep flowing to the replicas the proxy knows.
//
// The daemon binds the proxy's listener and a unix control socket, and
// starts `shoal proxy-serve` in a session of its own with both as inherited
// descriptors (Start). The proxy process serves requests on the listener
// and a small HTTP/JSON API on the control socket (Handler): routes, load,
// wait-idle, metrics, info and shutdown. It calls the daemon's API back to
// wake a cold app, and keeps calling while requests wait and the daemon is
// away. A restarted daemon finds the proxy through the control socket,
// adopts it (Open) and pushes its whole route table (Client.Sync). A daemon
// that stops gracefully drains and stops its proxy (Plane.Stop).
package dataplane

import (
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"maps"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"

	"github.com/shoal-run/shoal/internal/httperr"
	"github.com/shoal-run/shoal/internal/proxy"
	"github.com/shoal-run/shoal/internal/route"
)

// Info describes a running proxy process.
type Info struct {
	Pid     int    `json:"pid"`
	Addr    string `json:"addr"`               // where it takes requests
	TLSAddr string `json:"tls_addr,omitempty"` // where it takes HTTPS requests
	Domain  string `json:"domain,omitempty"`
	Trusted string `json:"trusted_proxies,omitempty"` // as --trusted-proxies
	Version string `json:"version,omitempty"`
	// OnDemand is --on-demand: handshakes without a certificate ask the
	// daemon for one.
	OnDemand bool `json:"on_demand,omitempty"`
	// TCPPorts are the ports its TCP routes may listen on ("LO-HI"; ""
	// from a proxy that predates the range).
	TCPPorts string    `json:"tcp_ports,omitempty"`
	Started  time.Time `json:"started"`
}

// control serves the control API of one proxy process.
type control struct {
	p    *proxy.Proxy
	info Info
	reg  prometheus.Gatherer
	// stop drains the proxy within grace and ends the process after the
	// answer is sent.
	stop func(grace time.Duration)

	mu     sync.Mutex
	routes map[string]route.Route // as last pushed, by app (lower case)
	// Route versions (routeVersion): the table's, the highest applied;
	// floor, that of the last whole table; appVer, each app's last
	// change above floor (removals too). A change at or below floor, or
	// below appVer, is stale: a newer one reached the proxy first; one at
	// appVer is that change sent again.
	version, floor uint64
	appVer         map[string]uint64
	log            *slog.Logger
}

// maxRouteBody bounds a route push (the whole table in one call).
const maxRouteBody = 64 << 20

func newControl(p *proxy.Proxy, info Info, reg prometheus.Gatherer, stop func(time.Duration), log *slog.Logger) *control {
	return &control{p: p, info: info, reg: reg, stop: stop, routes: map[string]route.Route{}, appVer: map[string]uint64{}, log: log}
}

// Route versions: the daemon numbers every route change (?version=N,
// rising), so that a change sent again, or one that arrives after a newer
// one (a call given up on and retried), is applied once and never undoes
// a newer one. Every route call is answered with the versions the proxy
// has: the highest applied (headerVersion) and that of its last whole
// table (headerTable: 0 in a new process), and whether the change was
// applied (headerApplied: 0 when it was stale; 1 for the change last
// applied sent again, which is not applied twice). A call without a
// version is applied as it comes.
const (
	headerVersion = "X-Shoal-Route-Version"
	headerTable   = "X-Shoal-Route-Table"
	headerApplied = "X-Shoal-Route-Applied"
)

// routeVersion reads a route call's version (0: none).
func routeVersion(w http.ResponseWriter, r *http.Request) (uint64, bool) {
	s := r.URL.Query().Get("version")
	if s == "" {
		return 0, true
	}
	v, err := strconv.ParseUint(s, 10, 64)
	if err != nil {
		httperr.Write(w, http.StatusBadRequest, fmt.Errorf("version %q: not a number", s), "version")
		return 0, false
	}
	return v, true
}

// stale reports whether a change of app at version v is older than what
// the proxy holds. c.mu is held.
func (c *control) stale(app string, v uint64) bool {
	return v != 0 && (v <= c.floor || v < c.appVer[app])
}

// again reports whether a change of app at version v is the one last
// applied, sent again (its first call given up on, taken late): it is
// answered applied, and not applied twice. c.mu is held.
func (c *control) again(app string, v uint64) bool {
	return v != 0 && v > c.floor && v == c.appVer[app]
}

// applied records app's change at version v. c.mu is held.
func (c *control) applied(app string, v uint64) {
	if v != 0 {
		c.appVer[app] = v
		c.version = max(c.version, v)
	}
}

// answer ends a route call. c.mu is held.
func (c *control) answer(w http.ResponseWriter, applied bool) {
	w.Header().Set(headerVersion, strconv.FormatUint(c.version, 10))
	w.Header().Set(headerTable, strconv.FormatUint(c.floor, 10))
	if applied {
		w.Header().Set(headerApplied, "1")
	} else {
		w.Header().Set(headerApplied, "0")
	}
	w.WriteHeader(http.StatusNoContent)
}

// handler returns the control API:
//
//	GET    /v1/info                      Info
//	PUT    /v1/hop                       the proxy's node and hop key (Hop)
//	GET    /v1/routes                    every route as last pushed
//	PUT    /v1/routes?version=N          replace the whole table ([]route.Route)
//	PUT    /v1/routes/{app}?version=N    set one app's route (route.Route)
//	DELETE /v1/routes/{app}?version=N    remove an app
//	PUT    /v1/certs                     replace the certificates served over TLS ([]route.Cert)
//	GET    /v1/load                      map app → route.Load, every app
//	GET    /v1/load?since=NS             those whose load moved since (unix ns)
//	GET    /v1/load/{app}                one app's route.Load
//	POST   /v1/endpoints/{id}/wait-idle  answers 204 once the endpoint is idle
//	POST   /v1/endpoints/{id}/cut        the drain's grace is over: cut what is left
//	GET    /metrics                      the proxy's metrics (Prometheus text)
//	PUT    /v1/challenges                the ACME challenges answered ([]proxy.Challenge)
//	POST   /v1/shutdown?grace=30s        drain, answer, then exit
func (c *control) handler() http.Handler {
	mux := http.NewServeMux()
	mux.HandleFunc("GET /v1/info", func(w http.ResponseWriter, r *http.Request) { writeJSON(w, c.info) })
	mux.HandleFunc("PUT /v1/hop", c.setHop)
	mux.HandleFunc("GET /v1/routes", c.listRoutes)
	mux.HandleFunc("PUT /v1/routes", c.replaceRoutes)
	mux.HandleFunc("PUT /v1/routes/{app}", c.setRoute)
	mux.HandleFunc("DELETE /v1/routes/{app}", c.removeRoute)
	mux.HandleFunc("PUT /v1/certs", c.setCerts)
	mux.HandleFunc("GET /v1/load", func(w http.ResponseWriter, r *http.Request) {
		if v := r.URL.Query().Get("since"); v != "" {
			ns, err := strconv.ParseInt(v, 10, 64)
			if err != nil {
				httperr.Write(w, http.StatusBadRequest, fmt.Errorf("since %q: not unix nanoseconds", v), "since")
				return
			}
			writeJSON(w, c.p.LoadsSince(time.Unix(0, ns)))
			return
		}
		writeJSON(w, c.p.Loads())
	})
	mux.HandleFunc("GET /v1/load/{app}", func(w http.ResponseWriter, r *http.Request) {
		writeJSON(w, c.p.Load(r.PathValue("app")))
	})
	mux.HandleFunc("POST /v1/endpoints/{id}/wait-idle", func(w http.ResponseWriter, r *http.Request) {
		// A caller that goes away (a daemon killed mid-drain) cuts
		// nothing: only an explicit cut does.
		if err := c.p.Idle(r.Context(), r.PathValue("id")); err != nil {
			return
		}
		w.WriteHeader(http.StatusNoContent)
	})
	mux.HandleFunc("POST /v1/endpoints/{id}/cut", func(w http.ResponseWriter, r *http.Request) {
		c.p.Cut(r.PathValue("id"))
		w.WriteHeader(http.StatusNoContent)
	})
	mux.Handle("GET /metrics", promhttp.HandlerFor(c.reg, promhttp.HandlerOpts{}))
	mux.HandleFunc("PUT /v1/challenges", c.setChallenges)
	mux.HandleFunc("POST /v1/shutdown", c.shutdown)
	return mux
}

// Hop is the proxy's place in a cluster: its node, and the key hops
// between the nodes' proxies are authenticated with (proxy.SetHop).
type Hop struct {
	Node string `json:"node"`
	Key  []byte `json:"key"` // base64 in JSON
}

func (c *control) setHop(w http.ResponseWriter, r *http.Request) {
	var h Hop
	if !readJSON(w, r, &h) {
		return
	}
	if h.Node == "" || len(h.Key) == 0 {
		httperr.Write(w, http.StatusBadRequest, errors.New("a hop needs the node and the key"), "node")
		return
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	c.p.SetHop(h.Node, h.Key)
	w.WriteHeader(http.StatusNoContent)
}

func (c *control) listRoutes(w http.ResponseWriter, r *http.Request) {
	c.mu.Lock()
	out := make([]route.Route, 0, len(c.routes))
	for _, rt := range c.routes {
		out = append(out, rt)
	}
	c.mu.Unlock()
	writeJSON(w, out)
}

func (c *control) replaceRoutes(w http.ResponseWriter, r *http.Request) {
	v, ok := routeVersion(w, r)
	if !ok {
		return
	}
	var routes []route.Route
	if !readJSON(w, r, &routes) {
		return
	}
	next := make(map[string]route.Route, len(routes))
	for i, rt := range routes {
		if rt.App == "" {
			httperr.Write(w, http.StatusBadRequest, fmt.Errorf("route %d: no app", i), "app")
			return
		}
		next[strings.ToLower(rt.App)] = rt
	}
	// The lock orders table changes as they arrive.
	c.mu.Lock()
	defer c.mu.Unlock()
	if v != 0 && v < c.floor {
		c.answer(w, false) // an older whole table than the one held
		return
	}
	if v == 0 {
		c.version, c.floor = 0, 0
		clear(c.appVer)
	} else {
		// An app changed after the table was taken keeps its change.
		for app, av := range c.appVer {
			if av <= v {
				continue
			}
			if rt, ok := c.routes[app]; ok {
				next[app] = rt
			} else {
				delete(next, app)
			}
		}
		maps.DeleteFunc(c.appVer, func(_ string, av uint64) bool { return av <= v })
		c.floor, c.version = v, max(c.version, v)
	}
	c.p.Update(slices.Collect(maps.Values(next)))
	c.routes = next
	c.answer(w, true)
}

func (c *control) setRoute(w http.ResponseWriter, r *http.Request) {
	v, ok := routeVersion(w, r)
	if !ok {
		return
	}
	var rt route.Route
	if !readJSON(w, r, &rt) {
		return
	}
	name := r.PathValue("app")
	if rt.App == "" {
		rt.App = name
	}
	if !strings.EqualFold(rt.App, name) {
		httperr.Write(w, http.StatusBadRequest, fmt.Errorf("route of app %q sent to %q", rt.App, name), "app")
		return
	}
	app := strings.ToLower(name)
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.again(app, v) {
		c.answer(w, true)
		return
	}
	if c.stale(app, v) {
		c.answer(w, false)
		return
	}
	c.p.SetRoute(rt)
	c.routes[app] = rt
	c.applied(app, v)
	c.answer(w, true)
}

func (c *control) removeRoute(w http.ResponseWriter, r *http.Request) {
	v, ok := routeVersion(w, r)
	if !ok {
		return
	}
	name := r.PathValue("app")
	app := strings.ToLower(name)
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.again(app, v) {
		c.answer(w, true)
		return
	}
	if c.stale(app, v) {
		c.answer(w, false)
		return
	}
	c.p.RemoveRoute(name)
	delete(c.routes, app)
	c.applied(app, v)
	c.answer(w, true)
}

func (c *control) setChallenges(w http.ResponseWriter, r *http.Request) {
	var list []proxy.Challenge
	if !readJSON(w, r, &list) {
		return
	}
	if err := c.p.SetChallenges(list); err != nil {
		httperr.Write(w, http.StatusBadRequest, err, "challenges")
		return
	}
	w.WriteHeader(http.StatusNoContent)
}

// setCerts replaces the certificates the TLS listener serves. One that
// the proxy cannot use is logged and left out; the others are served.
func (c *control) setCerts(w http.ResponseWriter, r *http.Request) {
	var certs []route.Cert
	if !readJSON(w, r, &certs) {
		return
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if err := c.p.SetCerts(certs); err != nil {
		c.log.Warn("proxy: certificates left out", "err", err)
	}
	w.WriteHeader(http.StatusNoContent)
}

func (c *control) shutdown(w http.ResponseWriter, r *http.Request) {
	grace := 30 * time.Second
	if s := r.URL.Query().Get("grace"); s != "" {
		d, err := time.ParseDuration(s)
		if err != nil || d < 0 {
			httperr.Write(w, http.StatusBadRequest, fmt.Errorf("grace %q: not a duration", s), "grace")
			return
		}
		grace = d
	}
	c.stop(grace)
	w.WriteHeader(http.StatusNoContent)
}

func writeJSON(w http.ResponseWriter, v any) {
	w.Header().Set("Content-Type", "application/json")
	json.NewEncoder(w).Encode(v)
}

func readJSON(w http.ResponseWriter, r *http.Request, v any) bool {
	dec := json.NewDecoder(http.MaxBytesReader(w, r.Body, maxRouteBody))
	if err := dec.Decode(v); err != nil {
		var mbe *http.MaxBytesError
		if errors.As(err, &mbe) {
			httperr.Write(w, http.StatusRequestEntityTooLarge, err, "body")
			return false
		}
		httperr.Write(w, http.StatusBadRequest, fmt.Errorf("body: %w", err), "body")
		return false
	}
	return true
}
