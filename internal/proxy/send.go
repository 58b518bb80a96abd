package proxy

// The fast path's request side: sending a request to a replica, and
// sending it again elsewhere when that is safe.

import (
	"errors"
	"fmt"
	"io"
	"net/http"
	"syscall"
)

// forward sends the request in c.out to c.st.ep, to other endpoints of the
// app when a connect fails, once more on a new connection when a reused
// one turns out closed before any answer to a request that is safe to
// repeat, and to other endpoints when the replica fails before any answer
// to an idempotent request without a body.
func (c *cconn) forward() outcome {
	st := &c.st
	retryStale := c.req.safe && c.req.cl == 0
	retryDeath := c.req.idem && c.req.cl == 0
	deaths := 0
	fresh := false
	for {
		bc, err := st.ep.pool.get(st.Context, st.ep.addr, fresh, !retryStale)
		if err != nil {
			if c.w.gone.Load() || st.Context.Err() != nil {
				st.code = statusClientGone
				return closeConn
			}
			if oc, ok := c.retryOn(fmt.Errorf("app %q: %w (last: %w)", st.app.name, errNoReplica, err)); !ok {
				return oc
			}
			fresh = false
			continue
		}
		res, oc, err := c.exchange(bc, retryStale && bc.reused)
		switch res {
		case sendDone:
			return oc
		case sendStale:
			retryStale, fresh = false, true
		case sendDied:
			if !retryDeath || deaths >= maxDeathRetries {
				return c.fail(err)
			}
			deaths++
			if oc, ok := c.retryOn(err); !ok {
				return oc
			}
			retryStale, fresh = c.req.safe && c.req.cl == 0, false
		}
	}
}

// retryOn moves the request from the endpoint that failed it to another
// one of the app. When there is none it answers with err and returns false.
func (c *cconn) retryOn(err error) (outcome, bool) {
	st := &c.st
	st.tried = append(st.tried, st.ep)
	next := st.app.pick(st.tried)
	if next == nil {
		return c.fail(err), false
	}
	st.app.m.retries.Inc()
	st.ep.done()
	st.ep = next
	return keepConn, true
}

// maxDeathRetries bounds how often a request is sent again after a replica
// failed it before answering.
const maxDeathRetries = 2

// sendResult says what became of a request sent on a replica connection.
type sendResult int

const (
	sendDone  sendResult = iota // answered, or failed for good
	sendStale                   // a reused connection was closed before any answer
	sendDied                    // the replica's connection failed before any answer
)

// exchange sends the request on bc and relays the answer. mayRetry says
// that bc is a reused connection on which the request may be sent again.
// When the replica fails before any byte of its answer, exchange answers
// nothing and reports sendDied with the error.
func (c *cconn) exchange(bc *bconn, mayRetry bool) (res sendResult, oc outcome, err error) {
	keep := false
	ep := c.st.ep // the request's accounting may end before the answer's last write
	c.w.attach(bc)
	defer func() {
		c.w.detach(bc)
		if keep {
			ep.pool.put(bc)
		} else {
			bc.c.Close()
		}
	}()
	if c.w.gone.Load() {
		c.st.code = statusClientGone
		return sendDone, closeConn, nil
	}
	if _, err := bc.c.Write(c.out); err != nil {
		if mayRetry {
			return sendStale, 0, nil
		}
		if replicaDied(err) {
			return sendDied, 0, err
		}
		return sendDone, c.fail(err), nil
	}
	if c.unread > 0 {
		c.w.pause() // it may have watched while the request was queued
		if oc, ok := c.sendBody(bc); !ok {
			return sendDone, oc, nil
		}
	}
	if _, err := bc.br.Peek(1); err != nil && !c.w.gone.Load() {
		if mayRetry {
			return sendStale, 0, nil
		}
		if replicaDied(err) {
			return sendDied, 0, err
		}
	}
	return sendDone, c.relay(bc, &keep), nil
}

// replicaDied tells whether err is a replica connection closed or reset
// under a request, rather than a timeout.
func replicaDied(err error) bool {
	return errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF) || errors.Is(err, syscall.ECONNRESET) ||
		errors.Is(err, syscall.EPIPE) || errors.Is(err, syscall.ECONNABORTED)
}

// sendBody streams the rest of the request body to the replica.
func (c *cconn) sendBody(bc *bconn) (outcome, bool) {
	for c.unread > 0 {
		if c.br.Buffered() == 0 {
			c.readTimeout(c.f.timeouts.io)
			if _, err := c.br.Peek(1); err != nil {
				c.st.code = http.StatusBadRequest
				c.reject(c.st.code, fmt.Errorf("reading the request body: %w", err), "body", true)
				return closeConn, false
			}
		}
		k := int(min(int64(c.br.Buffered()), c.unread))
		b, _ := c.br.Peek(k)
		if _, err := bc.c.Write(b); err != nil {
			return c.fail(err), false
		}
		c.br.Discard(k)
		c.unread -= int64(k)
	}
	return keepConn, true
}

// fail answers a request that could not be forwarded, before anything of
// the answer was written.
func (c *cconn) fail(err error) outcome {
	if c.w.gone.Load() {
		c.st.code = statusClientGone
		return closeConn
	}
	ew := &errResponse{}
	c.f.p.fail(ew, &c.st, err)
	if ew.code == 0 {
		return closeConn
	}
	return c.sendError(ew, false)
}
