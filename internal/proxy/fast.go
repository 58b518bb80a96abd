package proxy

import (
	"bytes"
	"context"
	"io"
	"net/http"
	"sort"
	"strconv"
)

// fastReq is the request a client connection serves on the fast path: its
// parsed head, the bytes sent to the replica and its state. It is
// admission's inbound and the forwarder's leg.
type fastReq struct {
	c      *cconn
	req    request
	ans    answer
	out    []byte // the request as sent to the replica
	head   int    // of out, the head's length
	hopBuf []byte // out with a hop header, for another node's endpoint
	unread int64  // bytes of the request body still in the connection
	sticky []byte // the sticky cookie's value, copied out of the head
	st     reqState
	oc     outcome // what becomes of the connection once the request is sent
	guard  *uploadGuard
}

// serve answers the request whose head is the first n buffered bytes: it
// is admitted and forwarded as ServeHTTP does, in the same goroutine.
func (x *fastReq) serve(n int) outcome {
	c := x.c
	r := &x.req
	head, _ := c.br.Peek(n)
	if !r.parse(head) {
		if clAndTE(head) {
			c.refuseHead(errCLTE)
			return closeConn
		}
		return handOff
	}
	p := c.f.p
	if p.wantsChallenge(r.uri) {
		return handOff // answered by ServeHTTP, before routing
	}
	a := p.lookupHost(r.host)
	x.sticky = x.sticky[:0]
	if a != nil {
		rt := a.route.Load()
		if rt != nil && rt.h2c {
			return handOff // the h2c leg is net/http's (h2leg.go)
		}
		if len(r.cookies) > 0 && rt != nil && rt.byID != nil {
			x.copySticky()
		}
	}
	x.buildRequest()
	c.br.Discard(n)
	x.unread = r.cl
	st := &x.st
	*st = reqState{Context: c.f.ctx, tried: st.tried[:0]}
	defer func() {
		c.w.stop()
		x.finish()
		clear(st.tried)
		x.guard.stop()
		x.guard = nil
	}()
	var f *refusal
	if r.hop != nil {
		f = p.admitHop(st, string(r.host), string(r.hop), string(x.c.client))
	} else if f = x.readPrefix(a); f == nil {
		f = p.admit(st, a, r.cl, x)
	}
	if f != nil {
		return x.refuse(f)
	}
	x.oc = keepConn
	p.forward(st, x, r.safe, r.idem, r.cl)
	return x.oc
}

// copySticky keeps the sticky cookie's value, which the head's buffer
// does not keep once the body is read.
func (x *fastReq) copySticky() {
	for _, h := range x.req.cookies {
		if id := stickyID(h); len(id) > 0 {
			x.sticky = append(x.sticky, id...)
			return
		}
	}
}

// finish ends the request's accounting once: before the last bytes of
// its answer are sent, so that a client that has its answer sees the
// request counted as done.
func (x *fastReq) finish() { x.c.f.p.finish(&x.st) }

// host returns the Host of the request, from x.out.
func (x *fastReq) host() string { return string(x.hostBytes()) }

func (x *fastReq) isTLS() bool { return x.c.tls }
func (x *fastReq) sni() string { return x.c.sni }

// uri is the request target, from the request line in x.out.
func (x *fastReq) uri() string {
	line := x.out[:bytes.IndexByte(x.out, '\r')]
	_, rest, _ := bytes.Cut(line, []byte(" "))
	target, _, _ := bytes.Cut(rest, []byte(" "))
	return string(target)
}

// hostBytes returns the Host of the request, from x.out.
func (x *fastReq) hostBytes() []byte {
	const h = "\r\nHost: "
	i := bytes.Index(x.out[:x.head], []byte(h))
	if i < 0 {
		return nil
	}
	rest := x.out[i+len(h) : x.head]
	if j := bytes.IndexByte(rest, '\r'); j >= 0 {
		rest = rest[:j]
	}
	return rest
}

// admitted has nothing to do: the body's first bytes were read before.
func (x *fastReq) admitted(rt *routeSnap) *refusal { return nil }

// readPrefix reads the first inlineBody bytes of the request body before
// the request is admitted, under an upload guard (see upload.go): a small
// body then goes to the replica with the head in one write and can be
// sent again after a failed connect.
func (x *fastReq) readPrefix(a *app) *refusal {
	cl := x.req.cl
	if cl <= 0 || a == nil {
		return nil // no body, or a 404
	}
	if rt := a.route.Load(); rt == nil || (rt.maxBody >= 0 && cl > rt.maxBody) {
		return nil // refused at once
	}
	c := x.c
	x.guard = c.f.p.guardUpload(func() { c.c.Close() })
	if err := x.readBody(min(cl, inlineBody)); err != nil {
		return c.f.p.badBody(c.client, x.guard.bodyErr(err))
	}
	if x.unread == 0 {
		x.guard.stop()
	}
	return nil
}

func (x *fastReq) stuck(rt *routeSnap) *endpoint {
	if len(x.sticky) == 0 {
		return nil
	}
	return rt.stuckBytes(x.sticky)
}

// hold watches the client connection while the request waits, so that a
// client that hangs up leaves the queue.
func (x *fastReq) hold() context.Context {
	ctx, cancel := context.WithCancel(x.c.f.ctx)
	x.c.w.setCancel(cancel)
	x.c.w.start()
	return ctx
}

// readBody appends n bytes of the request body to x.out.
func (x *fastReq) readBody(n int64) error {
	c := x.c
	if int64(c.br.Buffered()) < n {
		c.readTimeout(c.f.timeouts.io)
	}
	l := len(x.out)
	x.out = append(x.out, make([]byte, n)...)
	for b := x.out[l:]; len(b) > 0; {
		m, err := c.br.Read(b)
		x.guard.add(m)
		x.unread -= int64(m)
		b = b[m:]
		if err != nil && len(b) > 0 {
			if err == io.EOF {
				err = io.ErrUnexpectedEOF
			}
			return err
		}
	}
	return nil
}

// buildRequest writes the request head for the replica into x.out: the
// hop-by-hop headers removed (the parser left out hopHeaders; those the
// Connection field lists go here) and the forwarded fields written.
func (x *fastReq) buildRequest() {
	r := &x.req
	b := append(x.out[:0], r.method...)
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
	// A request with a hop header is another node's proxy's: admitHop
	// refuses it unless the header authenticates.
	b = appendForwarded(b, &x.c.fw, r.host, &r.sent, r.hop != nil)
	m := string(r.method)
	if r.cl > 0 || m == "POST" || m == "PUT" || m == "PATCH" {
		b = append(b, "Content-Length: "...)
		b = strconv.AppendInt(b, r.cl, 10)
		b = append(b, "\r\n"...)
	}
	x.out = append(b, "\r\n"...)
	x.head = len(x.out)
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
	var low [256]byte // a host name has at most 253
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
	default:
		under := p.domain != "" && len(h) >= len(p.domain) && string(h[len(h)-len(p.domain):]) == p.domain
		if under {
			// <app>.<domain> is that app's, when it exists, before any
			// app's own domains (as appName).
			if a := (*p.apps.Load())[string(h[:len(h)-len(p.domain)])]; a != nil {
				return a
			}
		}
		if a := (*p.domains.Load())[string(h)]; a != nil {
			return a // an app's own domain
		}
		if !under {
			return nil
		}
		name = h[:len(h)-len(p.domain)]
	}
	return (*p.apps.Load())[string(name)]
}

func lastColon(b []byte) int {
	for i := len(b) - 1; i >= 0; i-- {
		if b[i] == ':' {
			return i
		}
	}
	return -1
}

// refuse answers the request with the refusal's JSON error, unless the
// client went away. The request body not yet read is skipped when small;
// otherwise, or when the refusal says so, the connection closes after the
// answer.
func (x *fastReq) refuse(f *refusal) outcome {
	if f.err == nil {
		return closeConn
	}
	x.c.w.pause() // the body left may be read
	ew := &errResponse{}
	f.write(ew)
	return x.sendError(ew, f.close)
}

// sendError writes an answer made by the handler code's error writers.
func (x *fastReq) sendError(ew *errResponse, closing bool) outcome {
	c := x.c
	left := x.unread
	keep := !closing && !x.req.close && left <= maxDrain && !c.f.shutting.Load()
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
	if !x.req.isHead {
		c.bw.Write(ew.body)
	}
	x.finish()
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
