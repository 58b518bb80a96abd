package proxy

import (
	"context"
	"errors"
	"fmt"
	"time"
)

// errRemoved is returned to a waiting request whose app was removed.
var errRemoved = errors.New("app removed")

// unavailableError is a 503 answer; retry says whether to send
// Retry-After, retryAfter its seconds (0: retryAfter's).
type unavailableError struct {
	msg        string
	retry      bool
	retryAfter int
}

func (e *unavailableError) Error() string { return e.msg }

// wait holds a request for an app that has no open endpoint: it asks the
// Activator to wake the app and waits, in the app's bounded queue, until a
// route change gives the app an endpoint (no polling: every change closes
// the app's wait channel), the queue timeout passes, or ctx ends. The
// queue timeout runs only while no start of the app is under way (the
// route's Starting): a request waits as long as a start progresses, and
// one that saw a start end without an endpoint (it failed) is answered at
// once. It returns the endpoint with the request counted on it.
func (p *Proxy) wait(ctx context.Context, a *app) (*endpoint, error) {
	rt := a.route.Load()
	if rt == nil {
		return nil, errRemoved
	}
	if n := a.queued.Add(1); n > rt.queueLimit {
		a.queued.Add(-1)
		return nil, &unavailableError{
			msg:   fmt.Sprintf("app %q is starting and its queue of %d requests is full", a.name, rt.queueLimit),
			retry: true,
		}
	} else if n == 1 {
		a.m.cold.Inc()
	}
	start := p.clock.Now()
	defer func() {
		a.queued.Add(-1)
		a.m.activation.Observe(p.clock.Since(start).Seconds())
	}()
	if p.activator != nil {
		p.activator.Activate(a.name)
	}
	timer := p.clock.NewTimer(rt.queueTimeout)
	defer timer.Stop()
	expired := timer.C() // nil while a start is under way
	started := false     // a start was under way while the request waited
	for {
		// Take the channel before looking at the route: a change after the
		// look closes this channel.
		ch := a.waitChan()
		rt = a.route.Load()
		if rt == nil {
			return nil, errRemoved
		}
		if rt.unavailable != "" {
			return nil, &unavailableError{msg: fmt.Sprintf("app %q: %s", a.name, rt.unavailable)}
		}
		if e := a.pick(nil); e != nil {
			return e, nil
		}
		if err := p.failing(a, rt); err != nil {
			return nil, err
		}
		switch {
		case rt.starting > 0:
			started = true
			if expired != nil {
				timer.Stop()
				expired = nil
			}
		case started && rt.frozen == 0:
			return nil, &unavailableError{
				msg:   fmt.Sprintf("app %q: its replica did not start", a.name),
				retry: true,
			}
		case expired == nil:
			// Nothing is under way any more: the timeout counts from now.
			select {
			case <-timer.C():
			default:
			}
			timer.Reset(rt.queueTimeout)
			expired = timer.C()
		}
		select {
		case <-ch:
		case <-expired:
			return nil, &unavailableError{
				msg:   fmt.Sprintf("app %q has no ready replica after %s", a.name, rt.queueTimeout),
				retry: true,
			}
		case <-ctx.Done():
			return nil, fmt.Errorf("app %q: waiting for a replica: %w", a.name, ctx.Err())
		}
	}
}

// failing is the answer to a request that finds app a without an endpoint
// while its route says it is failing, with nothing starting or frozen and
// its next start still to come; nil otherwise.
func (p *Proxy) failing(a *app, rt *routeSnap) *unavailableError {
	if rt.failing == "" || rt.starting > 0 || rt.frozen > 0 {
		return nil
	}
	left := rt.retryAt.Sub(p.clock.Now())
	if left <= 0 {
		return nil
	}
	secs := int((left + time.Second - 1) / time.Second)
	return &unavailableError{retry: true, retryAfter: secs,
		msg: fmt.Sprintf("app %q has no ready replica and its next start is in %ds: %s", a.name, secs, rt.failing)}
}
