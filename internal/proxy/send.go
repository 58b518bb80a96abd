package proxy

// The fast path's request side: one try at sending a request to a
// replica, as the forwarder's leg.

// send sends the request in x.out on a pooled connection to st.ep.
func (x *fastReq) send(st *reqState, fresh, stale bool) (sendResult, error) {
	bc, err := st.ep.pool.get(st.Context, st.ep.addr, fresh)
	if err != nil {
		return sendRefused, err
	}
	res, oc, err := x.exchange(bc, stale && bc.reused)
	if res == sendDone {
		x.oc = oc
	}
	return res, err
}

// gone tells whether the client hung up or the request's wait ended.
func (x *fastReq) gone(st *reqState) bool { return x.c.w.gone.Load() || st.Context.Err() != nil }

// fail answers a request that could not be forwarded, before anything of
// the answer was written.
func (x *fastReq) fail(st *reqState, err error) {
	if x.c.w.gone.Load() {
		st.code = statusClientGone
		x.oc = closeConn
		return
	}
	x.oc = x.refuse(x.c.f.p.failure(st, err))
}

// failed is fail for the answer's side: it returns what becomes of the
// connection.
func (x *fastReq) failed(err error) outcome {
	x.fail(&x.st, err)
	return x.oc
}

// exchange sends the request on bc and relays the answer. mayRetry says
// that bc is a reused connection on which the request may be sent again.
// When the replica fails before any byte of its answer, exchange answers
// nothing and reports sendDied with the error.
func (x *fastReq) exchange(bc *bconn, mayRetry bool) (res sendResult, oc outcome, err error) {
	c := x.c
	keep := false
	ep := x.st.ep // the request's accounting may end before the answer's last write
	c.w.attach(bc)
	defer func() {
		c.w.detach(bc)
		if keep {
			ep.pool.put(bc)
		} else {
			ep.pool.drop(bc)
		}
	}()
	if c.w.gone.Load() {
		x.st.code = statusClientGone
		return sendDone, closeConn, nil
	}
	out := x.out
	if ep.node != "" {
		out = x.hopped(ep)
	}
	if _, err := bc.c.Write(out); err != nil {
		if mayRetry {
			return sendStale, 0, nil
		}
		if ep.died(err) {
			return sendDied, 0, err
		}
		return sendDone, x.failed(err), nil
	}
	if x.unread > 0 {
		c.w.pause() // it may have watched while the request was queued
		if oc, ok := x.sendBody(bc); !ok {
			return sendDone, oc, nil
		}
	}
	if _, err := bc.br.Peek(1); err != nil && !c.w.gone.Load() {
		if mayRetry {
			return sendStale, 0, nil
		}
		if ep.died(err) {
			return sendDied, 0, err
		}
	}
	return sendDone, x.relay(bc, &keep), nil
}

// sendBody streams the rest of the request body to the replica.
func (x *fastReq) sendBody(bc *bconn) (outcome, bool) {
	c := x.c
	for x.unread > 0 {
		if c.br.Buffered() == 0 {
			c.readTimeout(c.f.timeouts.io)
			if _, err := c.br.Peek(1); err != nil {
				x.refuse(x.st.refuseWith(c.f.p.badBody(c.client, x.guard.bodyErr(err))))
				return closeConn, false
			}
		}
		k := int(min(int64(c.br.Buffered()), x.unread))
		b, _ := c.br.Peek(k)
		if _, err := bc.c.Write(b); err != nil {
			return x.failed(err), false
		}
		c.br.Discard(k)
		x.guard.add(k)
		x.unread -= int64(k)
	}
	x.guard.stop()
	return keepConn, true
}
