package proxy

import (
	"errors"
	"fmt"
	"io"
	"net"
	"syscall"
)

// The forwarder sends an admitted request to its endpoint and owns the
// retry contract (see forward), whichever engine serves the request: the
// fast path (fastReq) and net/http's leg (stdReq: handed-off connections,
// upgrades, chunked uploads) each only send once, on a connection of the
// endpoint's pool, and say how it went.

// maxDeathRetries bounds how often a request is sent again after a replica
// failed it before answering.
const maxDeathRetries = 2

// sendResult says what became of one try at sending a request.
type sendResult int

const (
	sendDone    sendResult = iota // answered, or failed for good and answered so
	sendRefused                   // the connect failed: nothing was sent
	sendStale                     // a reused connection was closed before any answer
	sendDied                      // the replica's connection failed before any answer
)

// leg is one front end's way to send a request to st.ep.
type leg interface {
	// send tries once: on a new connection when fresh is set, else on a
	// pooled one checked clean just before (see pool.get); stale says
	// that the request may be sent again when a reused connection turns
	// out closed before any answer (the replica closed it after the
	// check; see sendStale).
	send(st *reqState, fresh, stale bool) (sendResult, error)
	// fail answers the request that could not be forwarded, with err.
	fail(st *reqState, err error)
	// gone tells whether the client went away.
	gone(st *reqState) bool
}

// forward sends the admitted request st to its endpoint through l, and
// sends it again when that is safe. This is the proxy's one retry
// contract: it depends only on the request's method and whether it has a
// body, never on the engine or on the kind of request (plain, streamed,
// an upgrade, a chunked upload):
//   - a connect that fails (refused, timed out after DialTimeout, or to an
//     endpoint whose connections were cut): nothing was sent, so any
//     request goes to another endpoint of the app, each tried once, until
//     one accepts; when none is left, an endpoint still routed that timed
//     out (a replica just thawed or started on a busy host, slow to
//     accept) is tried again, up to maxSlowRetries times; else 502;
//   - a reused connection closed before any byte of the answer (the
//     replica closed it after the idle check): a safe method (GET, HEAD,
//     OPTIONS) without a body is sent once more, on a new connection to
//     the same endpoint;
//   - a replica that failed before any byte of its answer (its connection
//     closed or reset, or cut by Cut): an idempotent method (the safe ones,
//     PUT, DELETE, TRACE) without a body goes to another endpoint, never
//     one it went to, at most maxDeathRetries times; else 502;
//   - anything else (a request with a body, of known length or chunked,
//     whose replica failed after the connect; a failure once a byte of the
//     answer came, an upgrade once switched; a timeout) is never sent again.
//
// A request another node's proxy sent (st.hop) goes to its endpoint or
// nowhere. safe and idempotent classify the request's method (methodKind);
// cl is its body's length (-1: chunked). Every move to another endpoint
// counts in shoal_proxy_retries_total.
func (p *Proxy) forward(st *reqState, l leg, safe, idempotent bool, cl int64) {
	if cl != 0 {
		safe, idempotent = false, false
	}
	stale := safe
	deaths := 0
	fresh := false
	st.sent = p.clock.Now()
	for {
		res, err := l.send(st, fresh, stale)
		switch res {
		case sendDone:
			return
		case sendRefused:
			slow := timedOut(err)
			err = fmt.Errorf("app %q: %w (last: %w)", st.app.name, errNoReplica, err)
			if l.gone(st) || (!st.retry() && !st.retrySlow(slow)) {
				l.fail(st, err)
				return
			}
			fresh = false
		case sendStale:
			stale, fresh = false, true
		case sendDied:
			if !idempotent || deaths >= maxDeathRetries || !st.retry() {
				l.fail(st, err)
				return
			}
			deaths++
			stale, fresh = safe, false
		}
	}
}

// retry moves the request from the endpoint that failed it to another one
// of the app, counting a retry; false when there is none.
func (st *reqState) retry() bool {
	if st.hop {
		return false
	}
	st.tried = append(st.tried, st.ep)
	next := st.app.pick(st.tried)
	if next == nil {
		return false
	}
	st.app.m.retries.Inc()
	st.ep.done()
	st.ep = next
	return true
}

// maxSlowRetries bounds how often a request connects again to an
// endpoint that did not accept within DialTimeout.
const maxSlowRetries = 2

// retrySlow has the request connect again to its endpoint, which did not
// accept in time (slow) and is the last one left, while the endpoint is
// still routed and the request has tried so fewer than maxSlowRetries
// times; it counts a retry.
func (st *reqState) retrySlow(slow bool) bool {
	if !slow || st.hop || st.slow >= maxSlowRetries || st.ep.closed.Load() {
		return false
	}
	st.slow++
	st.app.m.retries.Inc()
	return true
}

// timedOut tells whether a connect failed for want of an answer in time,
// rather than being refused.
func timedOut(err error) bool {
	var ne net.Error
	return errors.As(err, &ne) && ne.Timeout()
}

// methodKind classifies a request method: safe (GET, HEAD, OPTIONS) and
// idempotent (the safe ones, PUT, DELETE, TRACE).
func methodKind(method string) (safe, idempotent bool) {
	switch method {
	case "GET", "HEAD", "OPTIONS":
		return true, true
	case "PUT", "DELETE", "TRACE":
		return false, true
	}
	return false, false
}

// errNoReplica is the error of a request whose every connect failed.
var errNoReplica = errors.New("no replica accepted the connection")

// dialError marks a failed connect: nothing was sent to the replica.
type dialError struct{ err error }

func (e *dialError) Error() string { return "connect: " + e.err.Error() }
func (e *dialError) Unwrap() error { return e.err }

// died tells whether err, on a connection to e, failed the request
// before any answer: the replica's connection closed or reset under it
// (replicaDied), or this proxy cut e's connections (its node left the
// cluster's live set, or its drain's grace is over), which the forwarder
// treats alike.
func (e *endpoint) died(err error) bool {
	return replicaDied(err) || (errors.Is(err, net.ErrClosed) && e.pool.isCut()) || (e.h2 != nil && e.h2.isCut())
}

// replicaDied tells whether err is a replica connection closed or reset
// under a request, rather than a timeout.
func replicaDied(err error) bool {
	return errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF) || errors.Is(err, syscall.ECONNRESET) ||
		errors.Is(err, syscall.EPIPE) || errors.Is(err, syscall.ECONNABORTED)
}
