package dataplane

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/url"
	"sync"
	"time"

	"github.com/shoal-run/shoal/internal/clock"
)

// A wake-up the daemon did not take (no answer within the call's time,
// or an error status) is sent again while requests for the app wait:
// after activateRetry, then twice as long each time up to
// activateRetryMax, each call given twice the time of the one before, from
// activateCall up to activateCallMax, so that a daemon slowed down by
// load is not asked ever more often with calls it cannot answer in time.
const (
	activateRetry    = 50 * time.Millisecond
	activateRetryMax = time.Second
	activateCall     = 2 * time.Second
	activateCallMax  = 30 * time.Second
)

// activator wakes cold apps by calling the daemon's API. The proxy calls
// Activate for every request that has to wait; at most one call per app is
// on the wire, and one more follows it when requests came meanwhile. While
// the daemon is away (restarting) the call is repeated until it answers or
// no request for the app waits any more.
type activator struct {
	log    *slog.Logger
	hc     *http.Client
	clock  clock.Clock
	queued func(app string) bool // whether requests for app still wait

	ctx    context.Context
	cancel context.CancelFunc

	mu    sync.Mutex
	state map[string]*wake
	// asked holds each name last asked for on demand, and the answer.
	asked map[string]*demand
	// demands holds a slot per demand on the wire (maxDemands).
	demands chan struct{}
	// demandHC carries demands: the daemon may ask the operator's URL.
	demandHC *http.Client
}

// demand is a name asked for on demand: done is closed once the daemon
// answered, ok whether it is obtaining a certificate for it.
type demand struct {
	at   time.Time
	done chan struct{}
	ok   bool
}

type wake struct {
	again bool // a request asked while a call was on the wire
}

func newActivator(socket string, log *slog.Logger) *activator {
	a := &activator{log: log, clock: clock.Real{}, state: map[string]*wake{}, queued: func(string) bool { return false },
		asked: map[string]*demand{}, demands: make(chan struct{}, maxDemands)}
	a.ctx, a.cancel = context.WithCancel(context.Background())
	a.hc = unixClient(socket, 0) // each call has its time (activateCall)
	a.demandHC = unixClient(socket, demandTimeout)
	return a
}

// Activate asks the daemon to wake app; it never blocks.
func (a *activator) Activate(app string) {
	if a.hc == nil {
		return
	}
	a.mu.Lock()
	defer a.mu.Unlock()
	if w := a.state[app]; w != nil {
		w.again = true
		return
	}
	a.state[app] = &wake{}
	go a.run(app)
}

func (a *activator) run(app string) {
	warned := false
	wait, timeout := activateRetry, activateCall
	for {
		err := a.call(app, timeout)
		a.mu.Lock()
		w := a.state[app]
		switch {
		case err == nil && w.again:
			w.again = false
			a.mu.Unlock()
			continue
		case err == nil, a.ctx.Err() != nil:
			delete(a.state, app)
			a.mu.Unlock()
			return
		}
		w.again = false
		a.mu.Unlock()
		if !warned {
			a.log.Warn("proxy: the daemon does not answer a wake-up; retrying while requests wait", "app", app, "err", err)
			warned = true
		}
		t := a.clock.NewTimer(wait)
		select {
		case <-t.C():
		case <-a.ctx.Done():
			t.Stop()
		}
		wait, timeout = min(2*wait, activateRetryMax), min(2*timeout, activateCallMax)
		if !a.queued(app) || a.ctx.Err() != nil {
			a.mu.Lock()
			if w := a.state[app]; w != nil && !w.again {
				delete(a.state, app)
				a.mu.Unlock()
				return
			}
			a.mu.Unlock()
		}
	}
}

// call sends one wake-up: taken once the daemon answers 2xx (202).
func (a *activator) call(app string, timeout time.Duration) error {
	ctx, cancel := context.WithTimeout(a.ctx, timeout)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, "http://daemon/v1/apps/"+url.PathEscape(app)+"/activate", nil)
	if err != nil {
		return err
	}
	resp, err := a.hc.Do(req)
	if err != nil {
		return err
	}
	io.Copy(io.Discard, io.LimitReader(resp.Body, 4096))
	resp.Body.Close()
	if resp.StatusCode/100 != 2 {
		return fmt.Errorf("wake-up of %s: the daemon answered %s", app, resp.Status)
	}
	return nil
}

const (
	// demandEvery is how often one name a handshake wanted is asked for.
	demandEvery = time.Minute
	// maxAsked is how many names asked for within demandEvery are kept;
	// a name beyond is not asked for.
	maxAsked = 4096
	// maxDemands is how many demands may be on the wire at once; a
	// handshake's beyond is dropped.
	maxDemands = 4
	// demandTimeout bounds one demand (the daemon's policy may ask the
	// operator's URL, which has 5 s).
	demandTimeout = 15 * time.Second
)

// CertMissing asks the daemon to order a certificate for name on demand
// (POST /v1/certs/{name}/demand; the daemon's policy decides) and reports
// whether it does, so the handshake waits for it. A name is asked for at
// most once a minute (a handshake meanwhile shares the answer, waiting for
// it within ctx), and at most maxDemands at once: a handshake beyond is
// told no. A daemon that cannot be reached is asked again next time.
func (a *activator) CertMissing(ctx context.Context, name string) bool {
	if a.hc == nil {
		return false
	}
	now := time.Now()
	a.mu.Lock()
	if d, ok := a.asked[name]; ok && now.Sub(d.at) < demandEvery {
		a.mu.Unlock()
		select {
		case <-d.done:
			return d.ok
		case <-ctx.Done():
			return false
		}
	}
	select {
	case a.demands <- struct{}{}:
		defer func() { <-a.demands }()
	default:
		a.mu.Unlock()
		return false
	}
	if len(a.asked) >= maxAsked {
		for n, d := range a.asked {
			if now.Sub(d.at) >= demandEvery {
				delete(a.asked, n)
			}
		}
		if len(a.asked) >= maxAsked {
			a.mu.Unlock()
			return false
		}
	}
	d := &demand{at: now, done: make(chan struct{})}
	a.asked[name] = d
	a.mu.Unlock()
	ok, err := a.demand(name)
	d.ok = ok
	close(d.done)
	if err != nil {
		a.mu.Lock()
		if a.asked[name] == d {
			delete(a.asked, name)
		}
		a.mu.Unlock()
	}
	return ok
}

// demand sends one demand: whether the daemon accepted it, or why it
// could not be asked.
func (a *activator) demand(name string) (bool, error) {
	req, err := http.NewRequestWithContext(a.ctx, http.MethodPost, "http://daemon/v1/certs/"+url.PathEscape(name)+"/demand", nil)
	if err != nil {
		return false, err
	}
	resp, err := a.demandHC.Do(req)
	if err != nil {
		return false, err
	}
	resp.Body.Close()
	return resp.StatusCode/100 == 2, nil
}

func (a *activator) close() { a.cancel() }

// unixClient is an HTTP client whose every connection goes to the unix
// socket at path.
func unixClient(path string, timeout time.Duration) *http.Client {
	if path == "" {
		return nil
	}
	d := net.Dialer{Timeout: time.Second}
	return &http.Client{
		Timeout: timeout,
		Transport: &http.Transport{
			Proxy: nil,
			DialContext: func(ctx context.Context, _, _ string) (net.Conn, error) {
				return d.DialContext(ctx, "unix", path)
			},
			MaxIdleConnsPerHost: 16,
			IdleConnTimeout:     time.Minute,
			DisableCompression:  true,
		},
	}
}
