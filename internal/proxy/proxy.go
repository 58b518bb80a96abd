// Package proxy is the HTTP data path of shoal's serving: it routes a request
// by its Host header (<app>.localhost or <app>.<domain>) to one ready replica
// of the app, chosen by least outstanding requests between two random
// choices within a revision drawn by the route's weights (or the replica a
// sticky cookie names), and holds requests for an app that has no ready
// replica while an Activator wakes it. A request that a replica failed
// before answering goes to another one when repeating it is safe.
//
// The routing table is replaced with one atomic pointer swap per change and
// is read without locks. An endpoint that leaves an app's route is closed: no
// request picks it after the change returns, requests already sent to it
// finish, and WaitIdle reports when the last of them is done, so that the
// replica can be frozen or stopped without dropping a request.
package proxy

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"net/http/httputil"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/shoal-run/shoal/internal/clock"
	"github.com/shoal-run/shoal/internal/httperr"
)

// retryAfter is the Retry-After value, in seconds, of a 503 sent while an app
// is cold.
const retryAfter = "1"

// Activator wakes an app that has no ready endpoint (thaws a frozen replica
// or starts one). Activate must not block long; it is called for every
// request that has to wait, so many times for one wake-up. The proxy then
// waits for an endpoint to appear through SetRoute or Update.
type Activator interface {
	Activate(app string)
}

// Options configure a Proxy.
type Options struct {
	Activator  Activator             // may be nil: requests then only wait for a route
	Domain     string                // also route <app>.<Domain>
	Registerer prometheus.Registerer // may be nil
	Logger     *slog.Logger
	Clock      clock.Clock // for LastRequest and queue timing; default clock.Real
	// Transport overrides the shared transport to replicas (tests).
	Transport http.RoundTripper
}

// Proxy forwards requests to app replicas: as an http.Handler, or, faster,
// on the connections it accepts itself in Serve.
type Proxy struct {
	activator Activator
	domain    string // ".<domain>", lower case, or ""
	log       *slog.Logger
	clock     clock.Clock
	metrics   *metrics
	rp        *httputil.ReverseProxy

	table atomic.Pointer[map[string]*app] // app name → app; read without locks

	mu        sync.Mutex           // serializes table changes
	endpoints map[string]*endpoint // by ID; guarded by mu

	front server // the listener side of Serve
}

// New returns a Proxy with an empty table.
func New(o Options) *Proxy {
	p := &Proxy{
		activator: o.Activator,
		log:       o.Logger,
		clock:     o.Clock,
		endpoints: map[string]*endpoint{},
	}
	if p.log == nil {
		p.log = slog.Default()
	}
	if p.clock == nil {
		p.clock = clock.Real{}
	}
	if d := strings.Trim(strings.ToLower(o.Domain), "."); d != "" {
		p.domain = "." + d
	}
	p.metrics = newMetrics(p, o.Registerer)
	base := o.Transport
	if base == nil {
		base = NewTransport()
	}
	p.rp = &httputil.ReverseProxy{
		Director:       director,
		Transport:      &retryTransport{base: base},
		BufferPool:     bufferPool{},
		ModifyResponse: modifyResponse,
		ErrorHandler:   p.errorHandler,
		ErrorLog:       slog.NewLogLogger(p.log.Handler(), slog.LevelWarn),
	}
	empty := map[string]*app{}
	p.table.Store(&empty)
	p.front.init(p)
	return p
}

// ServeHTTP routes r to a replica of the app its Host names.
func (p *Proxy) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	name := p.appName(r.Host)
	a := (*p.table.Load())[name]
	if a == nil {
		httperr.Write(w, http.StatusNotFound, fmt.Errorf("no app serves host %q", r.Host), "host")
		return
	}
	rt := a.route.Load()
	if rt == nil {
		httperr.Write(w, http.StatusNotFound, fmt.Errorf("no app serves host %q", r.Host), "host")
		return
	}
	start := p.clock.Now()
	a.requests.Add(1)
	a.inFlight.Add(1)
	a.last.Store(start.UnixNano())
	st := &reqState{Context: r.Context(), app: a, code: 0}
	defer p.finish(st, start)

	if rt.unavailable != "" {
		st.code = http.StatusServiceUnavailable
		httperr.Write(w, st.code, fmt.Errorf("app %q: %s", a.name, rt.unavailable), "")
		return
	}
	if r.Body != nil && r.Body != http.NoBody && rt.maxBody >= 0 {
		if r.ContentLength > rt.maxBody {
			st.code = http.StatusRequestEntityTooLarge
			httperr.Write(w, st.code, fmt.Errorf("request body of %d bytes is over the limit of %d bytes", r.ContentLength, rt.maxBody), "body")
			return
		}
		if r.ContentLength < 0 {
			r.Body = http.MaxBytesReader(w, r.Body, rt.maxBody)
		}
	}

	var ep *endpoint
	if rt.byID != nil {
		st.sticky = true
		for _, h := range r.Header["Cookie"] {
			if id := stickyID(h); id != "" {
				ep = rt.stuck(id)
				st.stuck = ep
				break
			}
		}
	}
	if ep == nil {
		ep = a.pick(nil)
	}
	if ep == nil {
		var err error
		ep, err = p.wait(r.Context(), a)
		if err != nil {
			var ue *unavailableError
			switch {
			case errors.As(err, &ue):
				st.code = http.StatusServiceUnavailable
				if ue.retry {
					w.Header().Set("Retry-After", retryAfter)
				}
				httperr.Write(w, st.code, err, "")
			case errors.Is(err, errRemoved):
				st.code = http.StatusNotFound
				httperr.Write(w, st.code, fmt.Errorf("no app serves host %q", r.Host), "host")
			default: // the client went away
				st.code = statusClientGone
			}
			return
		}
	}
	st.ep = ep
	if direct(r) {
		p.forward(w, r, st)
		return
	}
	p.rp.ServeHTTP(w, r.WithContext(st))
}

// statusClientGone is recorded for a request whose client went away before
// an answer (nginx's 499).
const statusClientGone = 499

// finish releases what a request holds and records it.
func (p *Proxy) finish(st *reqState, start time.Time) {
	now := p.clock.Now()
	a := st.app
	if st.ep != nil {
		st.ep.release(now)
	}
	a.inFlight.Add(-1)
	a.last.Store(now.UnixNano())
	code := st.code
	if code == 0 {
		if err := st.Context.Err(); err != nil {
			code = statusClientGone
		} else {
			code = http.StatusBadGateway
		}
	}
	a.observe(code, now.Sub(start))
}

// appName returns the app a Host header names, or "".
func (p *Proxy) appName(host string) string {
	if i := strings.LastIndexByte(host, ':'); i >= 0 && !strings.HasSuffix(host, "]") {
		host = host[:i]
	}
	host = strings.TrimSuffix(host, ".")
	if hasUpper(host) {
		host = strings.ToLower(host)
	}
	if name, ok := strings.CutSuffix(host, ".localhost"); ok {
		return name
	}
	if p.domain != "" {
		if name, ok := strings.CutSuffix(host, p.domain); ok {
			return name
		}
	}
	return ""
}

func hasUpper(s string) bool {
	for i := 0; i < len(s); i++ {
		if c := s[i]; c >= 'A' && c <= 'Z' {
			return true
		}
	}
	return false
}

// reqState is the context of a forwarded request: it carries the app, the
// endpoint it holds, and the answer's status to the transport and the
// reverse proxy's hooks without another allocation.
type reqState struct {
	context.Context
	app   *app
	ep    *endpoint
	tried []*endpoint
	body  *retryBody
	code  int
	// sticky is set when the route is sticky; stuck is then the endpoint
	// the request's cookie named and got, or nil.
	sticky bool
	stuck  *endpoint
}

// setCookie returns the Set-Cookie value the answer carries: the sticky
// cookie when the route is sticky and the endpoint was freshly picked.
func (s *reqState) setCookie() string {
	if s.sticky && s.ep != s.stuck {
		return s.ep.cookie
	}
	return ""
}

type stateKey struct{}

// Value returns the state itself for stateKey and asks the parent otherwise.
func (s *reqState) Value(k any) any {
	if _, ok := k.(stateKey); ok {
		return s
	}
	return s.Context.Value(k)
}

func stateOf(r *http.Request) *reqState {
	st, _ := r.Context().Value(stateKey{}).(*reqState)
	return st
}

var _ http.Handler = (*Proxy)(nil)
