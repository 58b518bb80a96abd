package proxy

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"sort"
	"strconv"
	"strings"

	"github.com/shoal-run/shoal/internal/httperr"
)

// serveRequest answers the request whose head is the first n buffered
// bytes: it routes it as ServeHTTP does and forwards it in the same
// goroutine.
func (c *cconn) serveRequest(n int) outcome {
	r := &c.req
	head, _ := c.br.Peek(n)
	if !r.parse(head) {
		return handOff
	}
	p := c.f.p
	a := p.lookupHost(r.host)
	var rt *routeSnap
	if a != nil {
		rt = a.route.Load()
	}
	if rt == nil {
		err := fmt.Errorf("no app serves host %q", r.host)
		c.br.Discard(n)
		c.unread = r.cl
		return c.reject(http.StatusNotFound, err, "host", false)
	}
	c.buildRequest()
	c.br.Discard(n)
	c.unread = r.cl

	c.start = p.clock.Now()
	a.requests.Add(1)
	a.inFlight.Add(1)
	a.last.Store(c.start.UnixNano())
	st := &c.st
	*st = reqState{Context: c.f.ctx, app: a, tried: st.tried[:0]}
	defer func() {
		c.w.stop()
		c.finish()
		clear(st.tried)
	}()

	if rt.unavailable != "" {
		st.code = http.StatusServiceUnavailable
		return c.reject(st.code, fmt.Errorf("app %q: %s", a.name, rt.unavailable), "", false)
	}
	if rt.maxBody >= 0 && r.cl > rt.maxBody {
		st.code = http.StatusRequestEntityTooLarge
		return c.reject(st.code, fmt.Errorf("request body of %d bytes is over the limit of %d bytes", r.cl, rt.maxBody), "body", false)
	}
	if r.cl > 0 && r.cl <= inlineBody {
		if err := c.readBody(r.cl); err != nil {
			st.code = http.StatusBadRequest
			c.reject(st.code, fmt.Errorf("reading the request body: %w", err), "body", true)
			return closeConn
		}
	}

	var ep *endpoint
	if rt.byID != nil {
		st.sticky = true
		for _, h := range r.cookies {
			if id := stickyID(h); len(id) > 0 {
				ep = rt.stuckBytes(id)
				st.stuck = ep
				break
			}
		}
	}
	if ep == nil {
		ep = a.pick(nil)
	}
	if ep == nil {
		ctx, cancel := context.WithCancel(c.f.ctx)
		defer cancel()
		c.w.setCancel(cancel)
		c.w.start()
		st.Context = ctx
		var err error
		if ep, err = p.wait(ctx, a); err != nil {
			return c.waitFailed(err)
		}
	}
	st.ep = ep
	return c.forward()
}

// finish ends the request's accounting once: before the last bytes of
// its answer are sent, so that a client that has its answer sees the
// request counted as done.
func (c *cconn) finish() {
	if st := &c.st; st.app != nil {
		c.f.p.finish(st, c.start)
		st.ep, st.app = nil, nil
	}
}

// waitFailed answers a request that found no endpoint.
func (c *cconn) waitFailed(err error) outcome {
	st := &c.st
	var ue *unavailableError
	switch {
	case errors.As(err, &ue):
		st.code = http.StatusServiceUnavailable
		if ue.retry {
			return c.rejectRetry(err)
		}
		return c.reject(st.code, err, "", false)
	case errors.Is(err, errRemoved):
		st.code = http.StatusNotFound
		return c.reject(st.code, fmt.Errorf("no app serves host %q", c.hostOf()), "host", false)
	default: // the client went away
		st.code = statusClientGone
		return closeConn
	}
}

// hostOf returns the Host of the request being forwarded from c.out.
func (c *cconn) hostOf() string {
	_, rest, _ := strings.Cut(string(c.out), "\r\nHost: ")
	host, _, _ := strings.Cut(rest, "\r\n")
	return host
}

// buildRequest writes the request head for the replica into c.out: the
// hop-by-hop headers removed and X-Forwarded-For, -Host and -Proto set.
func (c *cconn) buildRequest() {
	r := &c.req
	b := append(c.out[:0], r.method...)
	b = append(b, ' ')
	b = append(b, r.uri...)
	b = append(b, " HTTP/1.1\r\nHost: "...)
	b = append(b, r.host...)
	b = append(b, "\r\n"...)
	for _, l := range r.lines {
		if len(r.conn) > 0 && listedIn(r.conn, l.name) {
			continue
		}
		b = append(b, l.line...)
		b = append(b, "\r\n"...)
	}
	b = append(b, "X-Forwarded-For: "...)
	for _, v := range r.xff {
		b = append(b, v...)
		b = append(b, ", "...)
	}
	b = append(b, c.client...)
	b = append(b, "\r\nX-Forwarded-Host: "...)
	b = append(b, r.host...)
	b = append(b, "\r\nX-Forwarded-Proto: "...)
	b = append(b, c.proto...)
	b = append(b, "\r\n"...)
	m := string(r.method)
	if r.cl > 0 || m == "POST" || m == "PUT" || m == "PATCH" {
		b = append(b, "Content-Length: "...)
		b = strconv.AppendInt(b, r.cl, 10)
		b = append(b, "\r\n"...)
	}
	c.out = append(b, "\r\n"...)
}

// lookupHost returns the app a Host header names, or nil; as appName,
// without allocating.
func (p *Proxy) lookupHost(host []byte) *app {
	if i := lastColon(host); i >= 0 && host[len(host)-1] != ']' {
		host = host[:i]
	}
	if n := len(host); n > 0 && host[n-1] == '.' {
		host = host[:n-1]
	}
	var low [128]byte
	if len(host) > len(low) {
		return nil
	}
	for i, ch := range host {
		if 'A' <= ch && ch <= 'Z' {
			ch += 'a' - 'A'
		}
		low[i] = ch
	}
	h := low[:len(host)]
	var name []byte
	switch {
	case len(h) >= len(".localhost") && string(h[len(h)-len(".localhost"):]) == ".localhost":
		name = h[:len(h)-len(".localhost")]
	case p.domain != "" && len(h) >= len(p.domain) && string(h[len(h)-len(p.domain):]) == p.domain:
		name = h[:len(h)-len(p.domain)]
	default:
		return nil
	}
	return (*p.table.Load())[string(name)]
}

func lastColon(b []byte) int {
	for i := len(b) - 1; i >= 0; i-- {
		if b[i] == ':' {
			return i
		}
	}
	return -1
}

// reject answers the request with a JSON error. The request body not yet
// read is skipped when small; otherwise, or when closing is set, the
// connection closes after the answer.
func (c *cconn) reject(code int, err error, field string, closing bool) outcome {
	ew := &errResponse{}
	httperr.Write(ew, code, err, field)
	return c.sendError(ew, closing)
}

// rejectRetry answers 503 with Retry-After.
func (c *cconn) rejectRetry(err error) outcome {
	ew := &errResponse{}
	ew.Header().Set("Retry-After", retryAfter)
	httperr.Write(ew, http.StatusServiceUnavailable, err, "")
	return c.sendError(ew, false)
}

// sendError writes an answer made by the handler code's error writers.
func (c *cconn) sendError(ew *errResponse, closing bool) outcome {
	left := c.unread
	keep := !closing && !c.req.close && left <= maxDrain && !c.f.shutting.Load()
	code := ew.code
	if code == 0 {
		code = http.StatusOK
	}
	c.writeStatus(code, http.StatusText(code))
	h := ew.Header()
	keys := make([]string, 0, len(h))
	for k := range h {
		if k != "Content-Length" && k != "Connection" {
			keys = append(keys, k)
		}
	}
	sort.Strings(keys)
	for _, k := range keys {
		for _, v := range h[k] {
			c.bw.WriteString(k)
			c.bw.WriteString(": ")
			c.bw.WriteString(v)
			c.bw.WriteString("\r\n")
		}
	}
	c.bw.WriteString("Content-Length: ")
	c.bw.WriteString(strconv.Itoa(len(ew.body)))
	if !keep {
		c.bw.WriteString("\r\nConnection: close")
	}
	c.bw.WriteString("\r\n\r\n")
	if !c.req.isHead {
		c.bw.Write(ew.body)
	}
	c.finish()
	if c.bw.Flush() != nil {
		return closeConn
	}
	if !keep {
		if left > 0 {
			c.lingerClose()
		}
		return closeConn
	}
	if !c.skipBody(left) {
		return closeConn
	}
	return keepConn
}

// errResponse collects an answer written through http.ResponseWriter.
type errResponse struct {
	h    http.Header
	code int
	body []byte
}

func (e *errResponse) Header() http.Header {
	if e.h == nil {
		e.h = http.Header{}
	}
	return e.h
}

func (e *errResponse) WriteHeader(code int) {
	if e.code == 0 {
		e.code = code
	}
}

func (e *errResponse) Write(b []byte) (int, error) {
	e.WriteHeader(http.StatusOK)
	e.body = append(e.body, b...)
	return len(b), nil
}
