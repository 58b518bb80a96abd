package proxy

import (
	"context"
	"errors"
	"io"
	"log/slog"
	"syscall"
	"testing"

	"github.com/shoal-run/shoal/internal/route"
)

// scriptLeg answers the forwarder's tries from a script and records them.
type scriptLeg struct {
	script []sendResult
	tries  []legTry
	failed error
	isGone bool
}

type legTry struct {
	ep           string
	fresh, stale bool
}

func (l *scriptLeg) send(st *reqState, fresh, stale bool) (sendResult, error) {
	l.tries = append(l.tries, legTry{ep: st.ep.id, fresh: fresh, stale: stale})
	res := l.script[len(l.tries)-1]
	switch res {
	case sendRefused:
		return res, &dialError{err: syscall.ECONNREFUSED}
	case sendDied:
		return res, io.ErrUnexpectedEOF
	}
	return res, nil
}

func (l *scriptLeg) fail(st *reqState, err error) { l.failed = err }
func (l *scriptLeg) gone(st *reqState) bool       { return l.isGone }

// The retry policy, whatever the front end: what is sent again, where,
// how often, and what counts as a retry.
func TestForwardPolicy(t *testing.T) {
	R, S, D, OK := sendRefused, sendStale, sendDied, sendDone
	for _, c := range []struct {
		name       string
		script     []sendResult
		safe, idem bool
		cl         int64
		gone       bool
		sends      int  // tries made
		retries    int  // moves to another endpoint
		fails      bool // answered as failed
		freshAfter bool // the second try was on a new connection
	}{
		{name: "connects refused, then one accepts", script: []sendResult{R, R, OK}, sends: 3, retries: 2},
		{name: "every connect refused", script: []sendResult{R, R, R}, sends: 3, retries: 2, fails: true},
		{name: "refused with a body", script: []sendResult{R, OK}, cl: 10, sends: 2, retries: 1},
		{name: "client gone after a refused connect", script: []sendResult{R}, gone: true, sends: 1, fails: true},
		{name: "stale connection, GET", script: []sendResult{S, OK}, safe: true, idem: true, sends: 2, freshAfter: true},
		{name: "replica dies, GET", script: []sendResult{D, OK}, safe: true, idem: true, sends: 2, retries: 1},
		{name: "replica dies three times, GET", script: []sendResult{D, D, D}, safe: true, idem: true, sends: 3, retries: 2, fails: true},
		{name: "replica dies, PUT", script: []sendResult{D, OK}, idem: true, sends: 2, retries: 1},
		{name: "replica dies, POST", script: []sendResult{D}, sends: 1, fails: true},
		{name: "replica dies, PUT with a body", script: []sendResult{D}, idem: true, cl: 3, sends: 1, fails: true},
	} {
		t.Run(c.name, func(t *testing.T) {
			p := New(Options{Logger: slog.New(slog.NewTextHandler(io.Discard, nil))})
			r := route.Route{App: "a"}
			for _, id := range []string{"e1", "e2", "e3"} {
				r.Endpoints = append(r.Endpoints, route.Endpoint{ID: id, Addr: "127.0.0.1:1", Revision: 1})
			}
			p.SetRoute(r)
			a := (*p.apps.Load())["a"]
			st := &reqState{Context: context.Background(), app: a, ep: a.pick(nil)}
			l := &scriptLeg{script: c.script, isGone: c.gone}
			p.forward(st, l, c.safe, c.idem, c.cl)

			if len(l.tries) != c.sends {
				t.Fatalf("%d tries %+v, want %d", len(l.tries), l.tries, c.sends)
			}
			if got := int(counterValue(a.m.retries)); got != c.retries {
				t.Errorf("retries counted %d, want %d", got, c.retries)
			}
			if (l.failed != nil) != c.fails {
				t.Errorf("failed with %v, want failure %v", l.failed, c.fails)
			}
			if c.fails && c.script[len(c.script)-1] == R && !errors.Is(l.failed, errNoReplica) {
				t.Errorf("failure %v, want errNoReplica", l.failed)
			}
			// Retries go to endpoints not tried yet; a stale retry stays.
			seen := map[string]bool{}
			for i, tr := range l.tries {
				again := i > 0 && c.script[i-1] == S
				if seen[tr.ep] && !again {
					t.Errorf("try %d went to %s again: %+v", i+1, tr.ep, l.tries)
				}
				if again && tr.ep != l.tries[i-1].ep {
					t.Errorf("a stale connection's retry moved to %s: %+v", tr.ep, l.tries)
				}
				seen[tr.ep] = true
			}
			if c.freshAfter && (!l.tries[1].fresh || l.tries[1].stale) {
				t.Errorf("after a stale connection: %+v, want a new connection and no second stale retry", l.tries[1])
			}
			if c.cl != 0 && l.tries[0].stale {
				t.Errorf("a request with a body may be sent on a stale connection: %+v", l.tries[0])
			}
			for _, e := range a.route.Load().endpoints {
				want := int64(0)
				if e == st.ep {
					want = 1
				}
				if got := e.inFlight.Load(); got != want {
					t.Errorf("endpoint %s holds %d requests, want %d (the request ends on %s)", e.id, got, want, st.ep.id)
				}
			}
		})
	}
}
