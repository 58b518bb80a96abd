package appapi

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"math"
	"net"
	"net/http"
	"regexp"
	"strconv"
	"strings"
	"sync/atomic"
	"time"

	"github.com/shoal-run/shoal/internal/clock"
	"github.com/shoal-run/shoal/internal/errdefs"
	"github.com/shoal-run/shoal/internal/httperr"
)

// Platform is what the self API needs of the serving controller. Every
// method acts for the caller only; refusals to keep bounds are *Refusal
// errors, a caller that has gone in the meantime is errdefs.ErrNotFound.
type Platform interface {
	// Identify returns the replica a token hash belongs to; ok is false
	// when no replica, present or recently gone, has it.
	Identify(tokenHash string) (c Caller, ok bool)
	// Replicate adds one replica of the caller's revision: a frozen one
	// thawed, else a new one started. With wait it returns once the new
	// replica is ready (or its start failed); without, at once.
	Replicate(ctx context.Context, c Caller, wait bool) (Result, error)
	Halt(ctx context.Context, c Caller) (Result, error)
	Die(ctx context.Context, c Caller) (Result, error)
	Metric(ctx context.Context, c Caller, name string, value float64) error
	Self(ctx context.Context, c Caller) (Self, error)
}

// Recorder writes an event to the event log without blocking.
type Recorder interface {
	Record(kind, app, replica, reason string, inputs map[string]float64)
}

// Event kinds the self API records.
const (
	KindCall    = "self"         // an accepted call
	KindRefused = "self-refused" // a call refused (401, 403, 409, 400)
)

// Server serves the self API. Platform is required; the rest have defaults.
type Server struct {
	Platform Platform
	Events   Recorder
	Logger   *slog.Logger
	Clock    clock.Clock
	// ScaleRate limits replicate, halt and die per app; ReportRate limits
	// metrics and GET /v1/self per app (zero: the defaults).
	ScaleRate, ReportRate Rate
	// Node is this node's name in a cluster ("" on one host): a caller
	// whose replica runs elsewhere is refused unless its node relayed
	// the call (WithOrigin).
	Node string

	scale, report, denials *limiter
	suppressed             atomic.Int64 // refusals not recorded one by one
}

// maxBody bounds a request body.
const maxBody = 4 << 10

// Handler returns the self API's handler: /v1/self and below, nothing else.
func (s *Server) Handler() http.Handler {
	if s.Clock == nil {
		s.Clock = clock.Real{}
	}
	if s.Logger == nil {
		s.Logger = slog.New(slog.DiscardHandler)
	}
	if s.ScaleRate == (Rate{}) {
		s.ScaleRate = DefaultScaleRate
	}
	if s.ReportRate == (Rate{}) {
		s.ReportRate = DefaultReportRate
	}
	s.scale, s.report = newLimiter(s.ScaleRate, s.Clock), newLimiter(s.ReportRate, s.Clock)
	s.denials = newLimiter(DefaultDenyRate, s.Clock)
	mux := http.NewServeMux()
	mux.HandleFunc("GET /v1/self", s.call("get", s.report, s.get))
	mux.HandleFunc("POST /v1/self/replicate", s.call("replicate", s.scale, s.replicate))
	mux.HandleFunc("POST /v1/self/halt", s.call("halt", s.scale, s.halt))
	mux.HandleFunc("POST /v1/self/die", s.call("die", s.scale, s.die))
	mux.HandleFunc("POST /v1/self/metrics", s.call("metrics", s.report, s.metrics))
	mux.HandleFunc("/", func(w http.ResponseWriter, r *http.Request) {
		status, msg := http.StatusNotFound, "no such call; the self API has GET /v1/self and POST /v1/self/{replicate,halt,die,metrics}"
		if strings.HasPrefix(r.URL.Path, "/v1/self") {
			status, msg = http.StatusMethodNotAllowed, r.Method+" "+r.URL.Path+" is not a call of the self API"
		}
		writeJSON(w, status, Error{Error: msg, Reason: "not_found"})
	})
	return mux
}

// op is one call once its caller is known; it returns the status, the body
// and what to record.
type op func(ctx context.Context, c Caller, r *http.Request) (status int, body any, note string, err error)

// call authenticates a request, applies the app's rate limit, runs fn and
// records what happened.
func (s *Server) call(name string, lim *limiter, fn op) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		o := s.origin(r)
		c, ok := s.authenticate(w, r, name, o)
		if !ok {
			return
		}
		r.Body = http.MaxBytesReader(w, r.Body, maxBody)
		if ok, wait := lim.take(c.App); !ok {
			secs := int(math.Ceil(wait.Seconds()))
			err := &Refusal{Reason: "rate", RetryAfter: secs,
				Msg: fmt.Sprintf("app %s: rate limit of its self API calls reached (%g a second, bursts of %g); retry in %ds", c.App, lim.rate.PerSecond, lim.rate.Burst, secs)}
			s.fail(w, c, name, err)
			return
		}
		status, body, note, err := fn(r.Context(), c, r)
		if err != nil {
			s.fail(w, c, name, err)
			return
		}
		s.record(KindCall, c.App, c.Replica, name+": "+note, map[string]float64{"status": float64(status)})
		writeJSON(w, status, body)
	}
}

// authenticate finds the caller of a request and checks that the call
// comes from its own address. It answers the refusals itself.
func (s *Server) authenticate(w http.ResponseWriter, r *http.Request, name string, o Origin) (Caller, bool) {
	from := o.IP
	tok, found := strings.CutPrefix(r.Header.Get("Authorization"), "Bearer ")
	tok = strings.TrimSpace(tok)
	if !found || tok == "" {
		s.deny401(w, name, from, Caller{}, "no bearer token (Authorization: Bearer $SHOAL_TOKEN)")
		return Caller{}, false
	}
	c, ok := s.Platform.Identify(HashToken(tok))
	switch {
	case !ok:
		s.deny401(w, name, from, Caller{}, "unknown token")
		return Caller{}, false
	case c.Gone:
		s.deny401(w, name, from, c, "token of replica "+c.Replica+", which is gone")
		return Caller{}, false
	case from == nil || !from.Equal(c.IP):
		s.deny(w, http.StatusForbidden, "forbidden", name, from, c,
			fmt.Sprintf("token of replica %s used from %s, not from the replica's own address %s", c.Replica, from, c.IP))
		return Caller{}, false
	case c.Node != "" && o.Node != "" && o.Node != c.Node:
		s.deny(w, http.StatusForbidden, "forbidden", name, from, c,
			fmt.Sprintf("token of replica %s used on node %s, not on the replica's own node %s", c.Replica, o.Node, c.Node))
		return Caller{}, false
	}
	q := r.URL.Query()
	if a := q.Get("app"); a != "" && a != c.App {
		s.deny(w, http.StatusForbidden, "forbidden", name, from, c, fmt.Sprintf("token of app %s names app %s", c.App, a))
		return Caller{}, false
	}
	if id := q.Get("replica"); id != "" && id != c.Replica {
		s.deny(w, http.StatusForbidden, "forbidden", name, from, c, fmt.Sprintf("token of replica %s names replica %s", c.Replica, id))
		return Caller{}, false
	}
	return c, true
}

func (s *Server) deny401(w http.ResponseWriter, name string, from net.IP, c Caller, why string) {
	w.Header().Set("WWW-Authenticate", `Bearer realm="shoal self API"`)
	s.deny(w, http.StatusUnauthorized, "unauthorized", name, from, c, why)
}

// deny answers and records a refused authentication. Past the per-address
// budget, refusals are answered but only counted, and the count goes with
// the next one recorded.
func (s *Server) deny(w http.ResponseWriter, status int, reason, name string, from net.IP, c Caller, why string) {
	writeJSON(w, status, Error{Error: why, Reason: reason})
	if ok, _ := s.denials.take(from.String()); !ok {
		s.suppressed.Add(1)
		return
	}
	inputs := map[string]float64{"status": float64(status)}
	if n := s.suppressed.Swap(0); n > 0 {
		inputs["suppressed"] = float64(n)
	}
	s.Logger.Warn("self API: call refused", "call", name, "status", status, "from", from.String(), "app", c.App, "replica", c.Replica, "reason", why)
	s.record(KindRefused, c.App, c.Replica, fmt.Sprintf("%s from %s: %d %s", name, from, status, why), inputs)
}

// checkNames refuses a body naming another app or replica than the caller.
func checkNames(c Caller, app, replica string) error {
	if app != "" && app != c.App {
		return &forbidden{fmt.Sprintf("token of app %s names app %s", c.App, app)}
	}
	if replica != "" && replica != c.Replica {
		return &forbidden{fmt.Sprintf("token of replica %s names replica %s", c.Replica, replica)}
	}
	return nil
}

type forbidden struct{ msg string }

func (f *forbidden) Error() string { return f.msg }

// fail answers and records a call the platform refused or could not do.
func (s *Server) fail(w http.ResponseWriter, c Caller, name string, err error) {
	var ref *Refusal
	var fb *forbidden
	var mbe *http.MaxBytesError
	status, body := http.StatusInternalServerError, Error{Error: err.Error(), Reason: "internal"}
	switch {
	case errors.As(err, &ref):
		status, body.Reason = http.StatusConflict, ref.Reason
		if ref.RetryAfter > 0 {
			w.Header().Set("Retry-After", strconv.Itoa(ref.RetryAfter))
		}
	case errors.As(err, &fb):
		status, body.Reason = http.StatusForbidden, "forbidden"
	case errors.As(err, &mbe):
		status, body.Reason, body.Error = http.StatusRequestEntityTooLarge, "invalid", fmt.Sprintf("body over %d bytes", maxBody)
	case errdefs.IsInvalid(err):
		status, body.Reason, body.Field = http.StatusBadRequest, "invalid", errdefs.Field(err)
	case errdefs.IsNotFound(err):
		status, body.Reason = http.StatusUnauthorized, "unauthorized"
		w.Header().Set("WWW-Authenticate", `Bearer realm="shoal self API"`)
	case errors.Is(err, errdefs.ErrUnavailable), errdefs.IsConflict(err):
		status, body.Reason = http.StatusServiceUnavailable, "unavailable"
	}
	if status >= 500 {
		s.Logger.Error("self API: call failed", "call", name, "app", c.App, "replica", c.Replica, "err", err)
	} else {
		s.Logger.Warn("self API: call refused", "call", name, "status", status, "app", c.App, "replica", c.Replica, "reason", err.Error())
	}
	s.record(KindRefused, c.App, c.Replica, fmt.Sprintf("%s: %d %s", name, status, err.Error()), map[string]float64{"status": float64(status)})
	writeJSON(w, status, body)
}

func (s *Server) record(kind, app, replica, reason string, inputs map[string]float64) {
	if s.Events != nil {
		s.Events.Record(kind, app, replica, reason, inputs)
	}
}

// decode reads an optional JSON body into v strictly (see
// httperr.DecodeJSON): an unknown field, a wrong type or trailing data is an
// error naming the field.
func decode(r *http.Request, v any) error {
	b, err := io.ReadAll(r.Body)
	if err != nil {
		var mbe *http.MaxBytesError
		if errors.As(err, &mbe) {
			return err
		}
		return errdefs.Invalid("body", "reading the request: %v", err)
	}
	if len(bytes.TrimSpace(b)) == 0 {
		return nil
	}
	return httperr.DecodeJSON(b, v)
}

func (s *Server) get(ctx context.Context, c Caller, r *http.Request) (int, any, string, error) {
	self, err := s.Platform.Self(ctx, c)
	if err != nil {
		return 0, nil, "", err
	}
	return http.StatusOK, self, fmt.Sprintf("%s, %d replica(s)", self.State, len(self.Replicas)), nil
}

func (s *Server) scaleCall(r *http.Request, c Caller) error {
	var req CallRequest
	if err := decode(r, &req); err != nil {
		return err
	}
	return checkNames(c, req.App, req.Replica)
}

func (s *Server) replicate(ctx context.Context, c Caller, r *http.Request) (int, any, string, error) {
	if err := s.scaleCall(r, c); err != nil {
		return 0, nil, "", err
	}
	wait := true
	if v := r.URL.Query().Get("wait"); v != "" {
		b, err := strconv.ParseBool(v)
		if err != nil {
			return 0, nil, "", errdefs.Invalid("wait", "%q is not true or false", v)
		}
		wait = b
	}
	res, err := s.Platform.Replicate(ctx, c, wait)
	if err != nil {
		return 0, nil, "", err
	}
	status := http.StatusOK
	if res.Replica.State != "ready" {
		status = http.StatusAccepted
	}
	note := fmt.Sprintf("%s %s", res.How, res.Replica.ID)
	if res.Seconds > 0 {
		note += fmt.Sprintf(", ready in %s", time.Duration(res.Seconds*float64(time.Second)).Round(10*time.Microsecond))
	}
	return status, res, note, nil
}

func (s *Server) halt(ctx context.Context, c Caller, r *http.Request) (int, any, string, error) {
	if err := s.scaleCall(r, c); err != nil {
		return 0, nil, "", err
	}
	res, err := s.Platform.Halt(ctx, c)
	if err != nil {
		return 0, nil, "", err
	}
	return http.StatusOK, res, "out of the route; in-flight requests finish", nil
}

func (s *Server) die(ctx context.Context, c Caller, r *http.Request) (int, any, string, error) {
	if err := s.scaleCall(r, c); err != nil {
		return 0, nil, "", err
	}
	res, err := s.Platform.Die(ctx, c)
	if err != nil {
		return 0, nil, "", err
	}
	return http.StatusAccepted, res, "draining, then stopped", nil
}

// metricName is a metric's name: what [scale] metric may name.
var metricName = regexp.MustCompile(`^[a-z][a-z0-9_]{0,62}$`)

// ValidMetricName reports whether name may name an app metric.
func ValidMetricName(name string) bool { return metricName.MatchString(name) }

func (s *Server) metrics(ctx context.Context, c Caller, r *http.Request) (int, any, string, error) {
	var req MetricRequest
	if err := decode(r, &req); err != nil {
		return 0, nil, "", err
	}
	if err := checkNames(c, req.App, req.Replica); err != nil {
		return 0, nil, "", err
	}
	switch {
	case !ValidMetricName(req.Name):
		return 0, nil, "", errdefs.Invalid("name", "%q must be lowercase letters, digits and _, starting with a letter, at most 63", req.Name)
	case req.Value == nil:
		return 0, nil, "", errdefs.Invalid("value", "is required (a number)")
	case math.IsNaN(*req.Value) || math.IsInf(*req.Value, 0) || *req.Value < 0:
		return 0, nil, "", errdefs.Invalid("value", "%v must be a finite number, 0 or more", *req.Value)
	}
	if err := s.Platform.Metric(ctx, c, req.Name, *req.Value); err != nil {
		return 0, nil, "", err
	}
	return http.StatusOK, map[string]any{"name": req.Name, "value": *req.Value},
		fmt.Sprintf("%s = %g", req.Name, *req.Value), nil
}

// remoteIP is the address a request came from.
func remoteIP(r *http.Request) net.IP {
	host, _, err := net.SplitHostPort(r.RemoteAddr)
	if err != nil {
		return nil
	}
	return net.ParseIP(host)
}

func writeJSON(w http.ResponseWriter, status int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	json.NewEncoder(w).Encode(v)
}
