package appapi

import (
	"context"
	"encoding/json"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/shoal-run/shoal/internal/clock"
	"github.com/shoal-run/shoal/internal/errdefs"
)

// fakePlatform knows tokens by hash and records the calls it is given.
type fakePlatform struct {
	mu      sync.Mutex
	callers map[string]Caller
	calls   []string
	refuse  error
	metrics map[string]float64
}

func (f *fakePlatform) Identify(hash string) (Caller, bool) {
	f.mu.Lock()
	defer f.mu.Unlock()
	c, ok := f.callers[hash]
	return c, ok
}

func (f *fakePlatform) did(call string, c Caller) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.calls = append(f.calls, call+" "+c.Replica)
	return f.refuse
}

func (f *fakePlatform) Replicate(_ context.Context, c Caller, wait bool) (Result, error) {
	if err := f.did("replicate", c); err != nil {
		return Result{}, err
	}
	st := "ready"
	if !wait {
		st = "starting"
	}
	return Result{Replica: Replica{ID: c.App + "-new", State: st}, How: "started", Seconds: 0.05}, nil
}

func (f *fakePlatform) Halt(_ context.Context, c Caller) (Result, error) {
	return Result{Replica: Replica{ID: c.Replica, State: "halted"}, How: "halted"}, f.did("halt", c)
}

func (f *fakePlatform) Die(_ context.Context, c Caller) (Result, error) {
	return Result{Replica: Replica{ID: c.Replica, State: "draining"}, How: "draining"}, f.did("die", c)
}

func (f *fakePlatform) Metric(_ context.Context, c Caller, name string, v float64) error {
	if err := f.did("metrics", c); err != nil {
		return err
	}
	f.mu.Lock()
	f.metrics[name] = v
	f.mu.Unlock()
	return nil
}

func (f *fakePlatform) Self(_ context.Context, c Caller) (Self, error) {
	return Self{ID: c.Replica, App: c.App, State: "ready"}, f.did("get", c)
}

type fakeRecorder struct {
	mu  sync.Mutex
	evs []string
}

func (r *fakeRecorder) Record(kind, app, replica, reason string, _ map[string]float64) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.evs = append(r.evs, kind+" "+app+" "+replica+" "+reason)
}

func (r *fakeRecorder) last() string {
	r.mu.Lock()
	defer r.mu.Unlock()
	if len(r.evs) == 0 {
		return ""
	}
	return r.evs[len(r.evs)-1]
}

type rig struct {
	t     *testing.T
	p     *fakePlatform
	ev    *fakeRecorder
	clock *clock.Fake
	h     http.Handler
	own   string // token of replica web-1, whose address is the test's
	other string // token of replica web-2, at another address
	gone  string // token of a replica that has gone
}

func newRig(t *testing.T, scale Rate) *rig {
	own, ownHash := NewToken()
	other, otherHash := NewToken()
	gone, goneHash := NewToken()
	r := &rig{t: t, own: own, other: other, gone: gone, ev: &fakeRecorder{}, clock: clock.NewFake(time.Unix(1e9, 0))}
	r.p = &fakePlatform{metrics: map[string]float64{}, callers: map[string]Caller{
		ownHash:   {App: "web", Replica: "web-1", IP: net.ParseIP("192.0.2.1")},
		otherHash: {App: "web", Replica: "web-2", IP: net.ParseIP("192.0.2.2")},
		goneHash:  {App: "web", Replica: "web-0", Gone: true},
	}}
	s := &Server{Platform: r.p, Events: r.ev, Clock: r.clock, ScaleRate: scale}
	r.h = s.Handler()
	return r
}

// do sends a call from 192.0.2.1, web-1's address.
func (r *rig) do(method, path, token, body string) (int, Error, *httptest.ResponseRecorder) {
	r.t.Helper()
	req := httptest.NewRequest(method, path, strings.NewReader(body))
	req.RemoteAddr = "192.0.2.1:40000"
	if token != "" {
		req.Header.Set("Authorization", "Bearer "+token)
	}
	w := httptest.NewRecorder()
	r.h.ServeHTTP(w, req)
	var e Error
	if w.Code >= 400 {
		if err := json.Unmarshal(w.Body.Bytes(), &e); err != nil || e.Error == "" || e.Reason == "" {
			r.t.Fatalf("%s %s: %d with a body that is not a JSON error: %q", method, path, w.Code, w.Body.String())
		}
	}
	return w.Code, e, w
}

func TestTokens(t *testing.T) {
	a, ha := NewToken()
	b, _ := NewToken()
	if len(a) < 43 || a == b || ha != HashToken(a) || strings.Contains(ha, a) {
		t.Fatalf("tokens %q %q hash %q", a, b, ha)
	}
}

func TestAuthorization(t *testing.T) {
	r := newRig(t, Rate{})
	forged, _ := NewToken()
	for _, c := range []struct {
		name, token, path string
		status            int
		reason, event     string
	}{
		{"no token", "", "/v1/self", 401, "unauthorized", "self-refused   get from 192.0.2.1: 401 no bearer token"},
		{"forged", forged, "/v1/self", 401, "unauthorized", "self-refused   get from 192.0.2.1: 401 unknown token"},
		{"expired", r.gone, "/v1/self", 401, "unauthorized", "self-refused web web-0 get from 192.0.2.1: 401 token of replica web-0, which is gone"},
		{"another replica's", r.other, "/v1/self", 403, "forbidden", "self-refused web web-2 get from 192.0.2.1: 403 token of replica web-2 used from 192.0.2.1"},
		{"naming another app", r.own, "/v1/self?app=shop", 403, "forbidden", "self-refused web web-1 get from 192.0.2.1: 403 token of app web names app shop"},
		{"naming another replica", r.own, "/v1/self?replica=web-2", 403, "forbidden", "self-refused web web-1 get from 192.0.2.1: 403 token of replica web-1 names replica web-2"},
	} {
		st, e, w := r.do("GET", c.path, c.token, "")
		if st != c.status || e.Reason != c.reason {
			t.Errorf("%s: %d %+v, want %d %s", c.name, st, e, c.status, c.reason)
		}
		if st == 401 && w.Header().Get("WWW-Authenticate") == "" {
			t.Errorf("%s: 401 without WWW-Authenticate", c.name)
		}
		if got := r.ev.last(); !strings.HasPrefix(got, c.event) {
			t.Errorf("%s: event %q, want %q...", c.name, got, c.event)
		}
	}
	if len(r.p.calls) != 0 {
		t.Fatalf("refused calls reached the platform: %v", r.p.calls)
	}
	// A body naming another app is refused too.
	if st, e, _ := r.do("POST", "/v1/self/die", r.own, `{"app":"shop"}`); st != 403 || e.Reason != "forbidden" {
		t.Fatalf("die naming another app: %d %+v", st, e)
	}
	if st, _, _ := r.do("GET", "/v1/self", r.own, ""); st != 200 {
		t.Fatalf("own token from own address: %d", st)
	}
	if got := r.ev.last(); got != "self web web-1 get: ready, 0 replica(s)" {
		t.Fatalf("event of an accepted call: %q", got)
	}
}

// Refused authentications past the per-address budget are answered but
// not recorded one by one; the next one recorded says how many were not.
func TestRefusalsDoNotFloodTheLog(t *testing.T) {
	r := newRig(t, Rate{})
	for i := 0; i < 50; i++ {
		if st, _, _ := r.do("GET", "/v1/self", "forged", ""); st != 401 {
			t.Fatalf("forged token: %d", st)
		}
	}
	if n := len(r.ev.evs); n != int(DefaultDenyRate.Burst) {
		t.Fatalf("%d refusals recorded, want %g", n, DefaultDenyRate.Burst)
	}
	r.clock.Advance(time.Second)
	r.do("GET", "/v1/self", "forged", "")
	if n := len(r.ev.evs); n != int(DefaultDenyRate.Burst)+1 {
		t.Fatalf("%d refusals recorded after a second", n)
	}
}

func TestCalls(t *testing.T) {
	r := newRig(t, Rate{})
	st, _, w := r.do("POST", "/v1/self/replicate", r.own, "")
	var res Result
	json.Unmarshal(w.Body.Bytes(), &res)
	if st != 200 || res.Replica.ID != "web-new" || res.Replica.State != "ready" {
		t.Fatalf("replicate: %d %s", st, w.Body.String())
	}
	if !strings.HasPrefix(r.ev.last(), "self web web-1 replicate: started web-new, ready in 50ms") {
		t.Fatalf("replicate event: %q", r.ev.last())
	}
	if st, _, _ := r.do("POST", "/v1/self/replicate?wait=false", r.own, ""); st != 202 {
		t.Fatalf("replicate without waiting: %d", st)
	}
	if st, e, _ := r.do("POST", "/v1/self/replicate?wait=maybe", r.own, ""); st != 400 || e.Field != "wait" {
		t.Fatalf("bad wait: %d %+v", st, e)
	}
	if st, _, _ := r.do("POST", "/v1/self/halt", r.own, ""); st != 200 {
		t.Fatalf("halt: %d", st)
	}
	if st, _, _ := r.do("POST", "/v1/self/die", r.own, `{"app":"web","replica":"web-1"}`); st != 202 {
		t.Fatalf("die: %d", st)
	}
	if st, _, _ := r.do("POST", "/v1/self/metrics", r.own, `{"name":"queue","value":12.5}`); st != 200 || r.p.metrics["queue"] != 12.5 {
		t.Fatalf("metrics: %d %v", st, r.p.metrics)
	}
	for _, c := range []struct{ body, field string }{
		{`{"name":"Queue","value":1}`, "name"},
		{`{"name":"queue"}`, "value"},
		{`{"name":"queue","value":-1}`, "value"},
		{`{"name":"queue","value":1,"extra":2}`, "extra"},
		{`{"name":"queue","value":"1"}`, "value"},
		{`{"name":"queue","value":1} {"name":"queue","value":2}`, "body"},
		{`not json`, "body"},
	} {
		if st, e, _ := r.do("POST", "/v1/self/metrics", r.own, c.body); st != 400 || e.Field != c.field {
			t.Errorf("metrics %s: %d %+v, want 400 naming %s", c.body, st, e, c.field)
		}
	}
	if st, _, _ := r.do("POST", "/v1/self/metrics", r.own, `{"name":"queue","value":1,"pad":"`+strings.Repeat("x", maxBody)+`"}`); st != 413 {
		t.Fatalf("big body: %d", st)
	}
	// The admin API is not served here.
	for _, p := range []string{"/v1/apps", "/v1/health", "/metrics", "/"} {
		if st, _, _ := r.do("GET", p, r.own, ""); st != 404 {
			t.Errorf("GET %s: %d, want 404", p, st)
		}
	}
	if st, _, _ := r.do("GET", "/v1/self/replicate", r.own, ""); st != 405 {
		t.Errorf("GET replicate: %d, want 405", st)
	}
}

// The platform's refusals are 409 with their reason; errors of its kinds
// map to their status codes.
func TestRefusals(t *testing.T) {
	r := newRig(t, Rate{})
	for _, c := range []struct {
		err    error
		status int
		reason string
	}{
		{Refuse("max", "app web already runs 3 replica(s), its max is 3"), 409, "max"},
		{Refuse("min", "app web runs 1 replica(s), its min is 1"), 409, "min"},
		{errdefs.ErrNotFound, 401, "unauthorized"},
		{errdefs.ErrUnavailable, 503, "unavailable"},
	} {
		r.p.refuse = c.err
		st, e, _ := r.do("POST", "/v1/self/replicate", r.own, "")
		if st != c.status || e.Reason != c.reason || e.Error != c.err.Error() {
			t.Errorf("%v: %d %+v, want %d %s", c.err, st, e, c.status, c.reason)
		}
		if !strings.Contains(r.ev.last(), "self-refused web web-1 replicate:") {
			t.Errorf("%v: event %q", c.err, r.ev.last())
		}
	}
}

// Each app has a token bucket for scaling calls, on the clock: past it,
// 409 with reason "rate" and Retry-After.
func TestRateLimit(t *testing.T) {
	r := newRig(t, Rate{Burst: 3, PerSecond: 0.5})
	for i := 0; i < 3; i++ {
		if st, _, _ := r.do("POST", "/v1/self/halt", r.own, ""); st != 200 {
			t.Fatalf("call %d: %d", i, st)
		}
	}
	st, e, w := r.do("POST", "/v1/self/halt", r.own, "")
	if st != 409 || e.Reason != "rate" || w.Header().Get("Retry-After") != "2" {
		t.Fatalf("over the rate: %d %+v Retry-After %q", st, e, w.Header().Get("Retry-After"))
	}
	// Reports have a bucket of their own.
	if st, _, _ := r.do("GET", "/v1/self", r.own, ""); st != 200 {
		t.Fatalf("GET over the scaling rate: %d", st)
	}
	r.clock.Advance(2 * time.Second)
	if st, _, _ := r.do("POST", "/v1/self/halt", r.own, ""); st != 200 {
		t.Fatalf("after 2s: %d", st)
	}
	if st, _, _ := r.do("POST", "/v1/self/halt", r.own, ""); st != 409 {
		t.Fatalf("the bucket refilled more than one token in 2s at 0.5/s: %d", st)
	}
}
