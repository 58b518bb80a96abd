package dataplane

import (
	"context"
	"log/slog"
	"net"
	"net/http"
	"net/url"
	"sync"
	"time"
)

// activateRetry is how often a wake-up is sent again while the daemon does
// not answer and requests for the app still wait.
const activateRetry = 50 * time.Millisecond

// activator wakes cold apps by calling the daemon's API. The proxy calls
// Activate for every request that has to wait; at most one call per app is
// on the wire, and one more follows it when requests came meanwhile. While
// the daemon is away (restarting) the call is repeated until it answers or
// no request for the app waits any more.
type activator struct {
	log    *slog.Logger
	hc     *http.Client
	queued func(app string) bool // whether requests for app still wait

	ctx    context.Context
	cancel context.CancelFunc

	mu    sync.Mutex
	state map[string]*wake
	// asked holds when each name was last asked for on demand.
	asked map[string]time.Time
	// demands holds a slot per demand on the wire (maxDemands).
	demands chan struct{}
}

type wake struct {
	again bool // a request asked while a call was on the wire
}

func newActivator(socket string, log *slog.Logger) *activator {
	a := &activator{log: log, state: map[string]*wake{}, queued: func(string) bool { return false },
		asked: map[string]time.Time{}, demands: make(chan struct{}, maxDemands)}
	a.ctx, a.cancel = context.WithCancel(context.Background())
	a.hc = unixClient(socket, 2*time.Second)
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
	for {
		err := a.call(app)
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
		select {
		case <-time.After(activateRetry):
		case <-a.ctx.Done():
		}
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

func (a *activator) call(app string) error {
	req, err := http.NewRequestWithContext(a.ctx, http.MethodPost, "http://daemon/v1/apps/"+url.PathEscape(app)+"/activate", nil)
	if err != nil {
		return err
	}
	resp, err := a.hc.Do(req)
	if err != nil {
		return err
	}
	resp.Body.Close()
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
)

// CertMissing asks the daemon to order a certificate for name on demand
// (POST /v1/certs/{name}/demand; the daemon's policy decides), at most
// once a minute per name and maxDemands at once; the rest are dropped.
func (a *activator) CertMissing(name string) {
	if a.hc == nil {
		return
	}
	select {
	case a.demands <- struct{}{}:
		defer func() { <-a.demands }()
	default:
		return
	}
	now := time.Now()
	a.mu.Lock()
	if t, ok := a.asked[name]; ok && now.Sub(t) < demandEvery {
		a.mu.Unlock()
		return
	}
	if len(a.asked) >= maxAsked {
		for n, t := range a.asked {
			if now.Sub(t) >= demandEvery {
				delete(a.asked, n)
			}
		}
		if len(a.asked) >= maxAsked {
			a.mu.Unlock()
			return
		}
	}
	a.asked[name] = now
	a.mu.Unlock()
	req, err := http.NewRequestWithContext(a.ctx, http.MethodPost, "http://daemon/v1/certs/"+url.PathEscape(name)+"/demand", nil)
	if err != nil {
		return
	}
	resp, err := a.hc.Do(req)
	if err != nil {
		return
	}
	resp.Body.Close()
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
