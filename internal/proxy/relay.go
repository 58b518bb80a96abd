package proxy

import (
	"bufio"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/httputil"
	"strconv"
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

// readAnswerHead waits for a whole answer head in bc's buffer and returns
// its length, or 0 when it does not fit or has a bare LF.
func readAnswerHead(bc *bconn) (int, error) {
	for {
		buf, _ := bc.br.Peek(bc.br.Buffered())
		switch n := headEnd(buf); {
		case n > 0:
			return n, nil
		case n < 0 || len(buf) == bc.br.Size():
			return 0, nil
		}
		if _, err := bc.br.Peek(len(buf) + 1); err != nil {
			return 0, err
		}
	}
}

// relay reads the replica's answer and writes it to the client.
// keepBackend is set when bc can carry another request.
func (c *cconn) relay(bc *bconn, keepBackend *bool) outcome {
	a := &c.ans
	var n int
	for {
		var err error
		if n, err = readAnswerHead(bc); err != nil {
			return c.fail(err)
		}
		if n == 0 {
			return c.relaySlow(bc, keepBackend)
		}
		head, _ := bc.br.Peek(n)
		if !a.parse(head) {
			return c.relaySlow(bc, keepBackend)
		}
		if a.code == http.StatusSwitchingProtocols {
			return c.fail(errors.New("replica switched protocols unasked"))
		}
		if a.code >= 200 {
			break
		}
		bc.br.Discard(n)
	}
	c.st.code = a.code
	closing := c.req.close || c.f.shutting.Load()
	bodyless := c.req.isHead || a.code == http.StatusNoContent || a.code == http.StatusNotModified
	c.writeTimeout()
	c.bw.WriteString("HTTP/1.1 ")
	c.bw.Write(a.status)
	c.bw.WriteString("\r\n")
	for _, l := range a.lines {
		if (len(a.conn) > 0 && listedIn(a.conn, l.name)) || (!a.chunked && eqFold(l.name, "trailer")) {
			continue
		}
		c.bw.Write(l.line)
		c.bw.WriteString("\r\n")
	}
	c.writeSetCookie()
	chunked := !bodyless && (a.chunked || a.cl < 0)
	c.writeFraming(chunked, a.cl, closing)
	bc.br.Discard(n)

	var res copyResult
	switch {
	case bodyless:
	case a.chunked:
		if res = c.copyChunks(httputil.NewChunkedReader(bc.br), bc.br); res == copied {
			res = c.copyTrailers(bc)
		}
	case a.cl >= 0:
		res = c.copyLen(bc.br, a.cl, a.stream)
	default:
		a.close = true
		if res = c.copyChunks(bc.br, bc.br); res == copied {
			c.bw.WriteString("0\r\n\r\n")
		}
	}
	return c.finishAnswer(res, !a.close, closing, keepBackend)
}

// writeSetCookie adds the sticky cookie to an answer head when it is due.
func (c *cconn) writeSetCookie() {
	if v := c.st.setCookie(); v != "" {
		c.bw.WriteString("Set-Cookie: ")
		c.bw.WriteString(v)
		c.bw.WriteString("\r\n")
	}
}

// writeFraming ends an answer head with its length or chunked coding and
// whether the connection closes.
func (c *cconn) writeFraming(chunked bool, cl int64, closing bool) {
	switch {
	case chunked:
		c.bw.WriteString("Transfer-Encoding: chunked\r\n")
	case cl >= 0:
		c.bw.WriteString("Content-Length: ")
		c.bw.Write(strconv.AppendInt(c.num[:0], cl, 10))
		c.bw.WriteString("\r\n")
	}
	if closing {
		c.bw.WriteString("Connection: close\r\n")
	}
	c.bw.WriteString("\r\n")
}

// finishAnswer flushes a relayed answer and decides what becomes of both
// connections.
func (c *cconn) finishAnswer(res copyResult, backendReusable, closing bool, keepBackend *bool) outcome {
	if res == copied {
		c.finish()
		if c.bw.Flush() != nil {
			res = clientFailed
		}
	}
	if res == copied {
		*keepBackend = backendReusable
		if closing {
			return closeConn
		}
		return keepConn
	}
	if res == backendFailed && !c.w.gone.Load() {
		c.f.p.log.Warn("proxy: replica cut its answer short", "app", c.st.app.name, "endpoint", c.st.ep.id)
	}
	// The client's answer is cut short rather than made to look whole.
	return closeConn
}

// copyResult is how copying an answer body ended.
type copyResult int

const (
	copied copyResult = iota
	backendFailed
	clientFailed
)

// copyLen copies an n-byte body, flushing every read when the answer
// streams.
func (c *cconn) copyLen(src io.Reader, n int64, flush bool) copyResult {
	bp := buffers.Get().(*[]byte)
	defer buffers.Put(bp)
	buf := *bp
	for n > 0 {
		m, err := src.Read(buf[:min(int64(len(buf)), n)])
		if m > 0 {
			n -= int64(m)
			c.writeTimeout()
			if _, werr := c.bw.Write(buf[:m]); werr != nil {
				return clientFailed
			}
			if flush && c.bw.Flush() != nil {
				return clientFailed
			}
		}
		if err != nil && n > 0 {
			return backendFailed
		}
	}
	return copied
}

// copyChunks copies a body of unknown length up to its EOF in chunked
// coding; the last chunk is left to the caller. src reads from in, and the
// client's connection is flushed whenever in has (almost) nothing more
// buffered, so that a streamed answer is not held back.
func (c *cconn) copyChunks(src io.Reader, in *bufio.Reader) copyResult {
	bp := buffers.Get().(*[]byte)
	defer buffers.Put(bp)
	buf := *bp
	for {
		m, err := src.Read(buf)
		if m > 0 {
			c.writeTimeout()
			c.bw.Write(strconv.AppendInt(c.num[:0], int64(m), 16))
			c.bw.WriteString("\r\n")
			c.bw.Write(buf[:m])
			c.bw.WriteString("\r\n")
			if in.Buffered() < 32 && c.bw.Flush() != nil {
				return clientFailed
			}
		}
		if err == io.EOF {
			return copied
		}
		if err != nil {
			return backendFailed
		}
	}
}

// maxTrailerBytes bounds the trailers of a chunked answer.
const maxTrailerBytes = 64 << 10

// copyTrailers passes on the trailer section that follows the last chunk
// of a replica's answer and ends the client's chunked body.
func (c *cconn) copyTrailers(bc *bconn) copyResult {
	c.bw.WriteString("0\r\n")
	total := 0
	for {
		line, err := bc.br.ReadSlice('\n')
		if err != nil {
			return backendFailed
		}
		if total += len(line); total > maxTrailerBytes {
			return backendFailed
		}
		line = trimEOL(line)
		if len(line) == 0 {
			break
		}
		if _, _, ok := splitHeader(line); !ok {
			return backendFailed
		}
		c.bw.Write(line)
		c.bw.WriteString("\r\n")
	}
	c.bw.WriteString("\r\n")
	return copied
}

func trimEOL(b []byte) []byte {
	if n := len(b); n > 0 && b[n-1] == '\n' {
		b = b[:n-1]
	}
	if n := len(b); n > 0 && b[n-1] == '\r' {
		b = b[:n-1]
	}
	return b
}

// Requests handed to http.ReadResponse; only their method is read.
var (
	reqGET  = &http.Request{Method: "GET"}
	reqHEAD = &http.Request{Method: "HEAD"}
)

// relaySlow relays an answer whose head the fast parser did not accept,
// read by http.ReadResponse.
func (c *cconn) relaySlow(bc *bconn, keepBackend *bool) outcome {
	req := reqGET
	if c.req.isHead {
		req = reqHEAD
	}
	resp, err := http.ReadResponse(bc.br, req)
	for err == nil && resp.StatusCode < 200 {
		if resp.StatusCode == http.StatusSwitchingProtocols {
			return c.fail(errors.New("replica switched protocols unasked"))
		}
		resp, err = http.ReadResponse(bc.br, req)
	}
	if err != nil {
		return c.fail(err)
	}
	// resp.Body is not closed: Close would read the rest of an unfinished
	// body; the connection is closed instead.
	c.st.code = resp.StatusCode
	closing := c.req.close || c.f.shutting.Load()
	bodyless := c.req.isHead || resp.StatusCode == http.StatusNoContent || resp.StatusCode == http.StatusNotModified
	c.writeTimeout()
	c.bw.WriteString("HTTP/1.1 ")
	c.bw.WriteString(resp.Status)
	c.bw.WriteString("\r\n")
	conn := resp.Header["Connection"]
	for k, vs := range resp.Header {
		if hopByHop(k) || listed(conn, k) || k == "Content-Length" {
			continue
		}
		for _, v := range vs {
			c.bw.WriteString(k)
			c.bw.WriteString(": ")
			c.bw.WriteString(v)
			c.bw.WriteString("\r\n")
		}
	}
	c.writeSetCookie()
	chunked := !bodyless && resp.ContentLength < 0
	if chunked {
		for k := range resp.Trailer {
			c.bw.WriteString("Trailer: ")
			c.bw.WriteString(k)
			c.bw.WriteString("\r\n")
		}
	}
	cl := resp.ContentLength
	if bodyless && resp.Header.Get("Content-Length") == "" {
		cl = -1
	}
	c.writeFraming(chunked, cl, closing)
	var res copyResult
	switch {
	case bodyless:
	case chunked:
		if res = c.copyChunks(resp.Body, bc.br); res == copied {
			c.bw.WriteString("0\r\n")
			for k, vs := range resp.Trailer {
				for _, v := range vs {
					c.bw.WriteString(k)
					c.bw.WriteString(": ")
					c.bw.WriteString(v)
					c.bw.WriteString("\r\n")
				}
			}
			c.bw.WriteString("\r\n")
		}
	default:
		res = c.copyLen(resp.Body, resp.ContentLength, false)
	}
	return c.finishAnswer(res, !resp.Close, closing, keepBackend)
}
