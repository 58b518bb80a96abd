package proxy

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"strconv"

	"github.com/shoal-run/shoal/internal/httperr"
)

// Admission is the one place a request is let in and given its replica,
// whichever front end read it: the fast path (fastReq), net/http (stdReq).

// statusClientGone is recorded for a request whose client went away before
// an answer.
const statusClientGone = httperr.StatusClientClosed

// inbound is what admission needs of a request from its front end.
type inbound interface {
	// host is the request's Host, for the error that no app serves it.
	host() string
	// admitted is called once the route's limits let the request in,
	// before its endpoint is chosen; a refusal answers it instead.
	admitted(rt *routeSnap) *refusal
	// stuck returns the endpoint of rt the request's sticky cookie names,
	// with the request counted on it, or nil.
	stuck(rt *routeSnap) *endpoint
	// hold returns the context a request held for a cold app waits in.
	hold() context.Context
	// isTLS reports whether the request came over TLS; uri is its
	// request target (for a redirect to HTTPS).
	isTLS() bool
	uri() string
	// sni is the server name the TLS handshake asked for.
	sni() string
}

// refusal is an answer the proxy makes itself, in place of a replica's.
type refusal struct {
	code  int
	err   error // nil: no answer, the client went away
	field string
	retry bool // with Retry-After
	// retryAfter is Retry-After's seconds; 0: retryAfter's.
	retryAfter int
	close      bool // the client connection closes after it
	// location is the Location of a redirect (to HTTPS).
	location string
}

// write writes the refusal's JSON error body.
func (f *refusal) write(w http.ResponseWriter) {
	if f.err == nil {
		return
	}
	if f.retry {
		ra := retryAfter
		if f.retryAfter > 0 {
			ra = strconv.Itoa(f.retryAfter)
		}
		w.Header().Set("Retry-After", ra)
	}
	if f.location != "" {
		w.Header().Set("Location", f.location)
	}
	httperr.Write(w, f.code, f.err, f.field)
}

// refuseWith records f's code as the request's status and returns f.
func (st *reqState) refuseWith(f *refusal) *refusal {
	st.code = f.code
	return f
}

// refuse records code as the request's status and returns its refusal.
func (st *reqState) refuse(code int, err error, field string) *refusal {
	st.code = code
	return &refusal{code: code, err: err, field: field}
}

// admit routes a request for app a (nil when its Host names none) whose
// body is cl bytes (-1: unknown). A request over TLS whose Host the
// connection's certificate does not cover is refused with 421 (see
// misdirected). It counts the request on the app (st.app
// is then set, and finish must end it), refuses it when the route says so
// (503 while the app is unavailable, 413 for a body over the limit), and
// chooses its endpoint into st.ep: the one its sticky cookie names, else
// one picked by weight and load, else, while the app has none, one the
// activator wakes while the request is held in the app's queue.
func (p *Proxy) admit(st *reqState, a *app, cl int64, in inbound) *refusal {
	if in.isTLS() && p.misdirected(in.sni(), in.host()) {
		return &refusal{code: http.StatusMisdirectedRequest, field: "host",
			err: fmt.Errorf("host %q is not served by this connection's certificate (server name %q)", in.host(), in.sni())}
	}
	var rt *routeSnap
	if a != nil {
		rt = a.route.Load()
	}
	if rt == nil {
		return &refusal{code: http.StatusNotFound, err: fmt.Errorf("no app serves host %q", in.host()), field: "host"}
	}
	if rt.tcpPort > 0 {
		return &refusal{code: http.StatusNotFound, field: "host",
			err: fmt.Errorf("app %q takes TCP connections on port %d, not HTTP requests", a.name, rt.tcpPort)}
	}
	if p.edge.httpsPort.Load() != nil {
		redirect, hsts := p.edgeAnswer(rt, in.host(), in.isTLS())
		if redirect {
			return st.refuseWith(redirectRefusal(p.location(in.host(), in.uri())))
		}
		st.hsts = hsts
	}
	st.start = p.clock.Now()
	st.app = a
	a.requests.Add(1)
	a.inFlight.Add(1)
	a.last.Store(st.start.UnixNano())

	if rt.unavailable != "" {
		return st.refuse(http.StatusServiceUnavailable, fmt.Errorf("app %q: %s", a.name, rt.unavailable), "")
	}
	if rt.maxBody >= 0 && cl > rt.maxBody {
		return st.refuse(http.StatusRequestEntityTooLarge,
			fmt.Errorf("request body of %d bytes is over the limit of %d bytes", cl, rt.maxBody), "body")
	}
	if f := in.admitted(rt); f != nil {
		return f
	}
	var ep *endpoint
	if rt.byID != nil {
		st.sticky = true
		ep = in.stuck(rt)
		st.stuck = ep
	}
	if ep == nil {
		ep = a.pick(nil)
	}
	if ep == nil {
		st.Context = in.hold()
		st.tier = tierCold
		if rt.frozen > 0 {
			st.tier = tierFrozen
		}
		var err error
		ep, err = p.wait(st.Context, a)
		st.held = p.clock.Since(st.start)
		if err != nil {
			return waitFailed(st, err, in)
		}
	}
	st.ep = ep
	return nil
}

// waitFailed is the refusal of a request that found no endpoint.
func waitFailed(st *reqState, err error, in inbound) *refusal {
	var ue *unavailableError
	switch {
	case errors.As(err, &ue):
		f := st.refuse(http.StatusServiceUnavailable, err, "")
		f.retry, f.retryAfter = ue.retry, ue.retryAfter
		return f
	case errors.Is(err, errRemoved):
		return st.refuse(http.StatusNotFound, fmt.Errorf("no app serves host %q", in.host()), "host")
	default: // the client went away
		return st.refuse(statusClientGone, nil, "")
	}
}

// failure is the answer to a request that could not be forwarded.
func (p *Proxy) failure(st *reqState, err error) *refusal {
	var mbe *http.MaxBytesError
	gb := st.upload
	switch {
	case gb != nil && gb.err != nil && !errors.As(gb.err, &mbe):
		// The client's body failed (a malformed chunk, too slow): its
		// mistake, not the replica's.
		return st.refuseWith(p.badBody("", gb.err))
	case errors.As(err, &mbe):
		return st.refuse(http.StatusRequestEntityTooLarge, fmt.Errorf("request body is over the limit of %d bytes", mbe.Limit), "body")
	case st.Context.Err() != nil:
		return st.refuse(statusClientGone, nil, "")
	case errors.Is(err, errNoReplica):
		p.log.Warn("proxy: no replica accepted the connection", "app", st.app.name, "tried", len(st.tried), "err", err)
		return st.refuse(http.StatusBadGateway, fmt.Errorf("app %q: %w", st.app.name, errNoReplica), "")
	default:
		p.log.Warn("proxy: replica failed", "app", st.app.name, "endpoint", st.ep.id, "err", err)
		return st.refuse(http.StatusBadGateway, fmt.Errorf("app %q: the replica failed to answer", st.app.name), "")
	}
}

// finish ends a request admit counted, once: it releases its endpoint and
// records its status and duration. A request without a status failed
// before an answer: 499 when its client went away, else 502.
func (p *Proxy) finish(st *reqState) {
	a := st.app
	if a == nil {
		return
	}
	if st.hop {
		p.finishHop(st)
		return
	}
	now := p.clock.Now()
	if st.ep != nil {
		st.ep.finish(st, now)
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
	a.observe(code, now.Sub(st.start), st)
	st.app, st.ep = nil, nil
}
