package proxy

import (
	"bufio"
	"context"
	"errors"
	"io"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"time"
)

// The net/http leg forwards every request net/http read (a connection the
// fast path handed off, or any http.Server running ServeHTTP) on a
// connection of the endpoint's pool, the fast path's: it writes the request
// (a body of known length, or a chunked one streamed as it comes) and
// copies the answer in the handler's own goroutine. An upgrade the replica
// accepts is hijacked and copied both ways (upgrade.go).

// aLongTimeAgo is a deadline that makes blocked I/O return at once.
var aLongTimeAgo = time.Unix(1, 0)

// stdReq is a request net/http read, as admission's inbound and the
// forwarder's leg.
type stdReq struct {
	p  *Proxy
	w  http.ResponseWriter
	r  *http.Request
	st reqState
}

func (x *stdReq) host() string { return x.r.Host }

func (x *stdReq) isTLS() bool { return requestTLS(x.r) }
func (x *stdReq) sni() string { return requestSNI(x.r) }

func (x *stdReq) uri() string { return x.r.RequestURI }

// admitted bounds a body of unknown length by the route's limit.
func (x *stdReq) admitted(rt *routeSnap) *refusal {
	r := x.r
	if r.ContentLength < 0 && rt.maxBody >= 0 && r.Body != nil && r.Body != http.NoBody {
		r.Body = http.MaxBytesReader(x.w, r.Body, rt.maxBody)
	}
	return nil
}

func (x *stdReq) stuck(rt *routeSnap) *endpoint {
	for _, h := range x.r.Header["Cookie"] {
		if id := stickyID(h); id != "" {
			return rt.stuck(id)
		}
	}
	return nil
}

func (x *stdReq) hold() context.Context { return x.st.Context }

func (x *stdReq) gone(st *reqState) bool { return st.Context.Err() != nil }

func (x *stdReq) fail(st *reqState, err error) { x.p.failure(st, err).writeFor(x.w, x.r) }

// send sends the request on a pooled connection to st.ep.
func (x *stdReq) send(st *reqState, fresh, stale bool) (sendResult, error) {
	if st.ep.h2 != nil {
		return x.sendH2(st)
	}
	bc, err := st.ep.pool.get(st.Context, st.ep.addr, fresh)
	if err != nil {
		return sendRefused, err
	}
	return x.exchange(bc, stale && bc.reused)
}

// exchange sends the request on bc and copies the answer to the client.
// mayRetry says that bc is a reused connection on which the request may be
// sent again. When the replica fails before any byte of its answer,
// exchange writes nothing and reports sendDied with the error.
func (x *stdReq) exchange(bc *bconn, mayRetry bool) (sendResult, error) {
	w, r, st := x.w, x.r, &x.st
	ctx := r.Context()
	if bc.dl {
		bc.c.SetReadDeadline(time.Time{})
		bc.dl, bc.rdl = false, time.Time{}
	}
	stop := context.AfterFunc(ctx, func() { bc.c.SetDeadline(aLongTimeAgo) })
	keep := false
	defer func() {
		if !stop() {
			keep = false // the deadline was set
		}
		if keep {
			st.ep.pool.put(bc)
		} else {
			st.ep.pool.drop(bc)
		}
	}()
	hop := ""
	if st.ep.node != "" {
		hop = x.p.hopValue(st.ep, r.Host)
	}
	up := upgradeType(r.Header)
	fw := forwardedOf(r, x.p.trusted)
	if err := writeRequest(bc.bw, r, hop, &fw, st.hop, up); err != nil {
		var be *bodyError
		var mbe *http.MaxBytesError
		switch {
		case mayRetry && !errors.As(err, &be):
			return sendStale, nil
		case ctx.Err() != nil:
			st.code = statusClientGone
		case errors.As(err, &be) && errors.As(be.err, &mbe):
			w.Header().Set("Connection", "close")
			x.fail(st, be.err) // 413
		case errors.As(err, &be):
			w.Header().Set("Connection", "close")
			st.refuseWith(x.p.badBody(r.RemoteAddr, be.err)).writeFor(w, r)
		case st.ep.died(err):
			return sendDied, err
		default:
			x.fail(st, err)
		}
		return sendDone, nil
	}
	if _, err := bc.br.Peek(1); err != nil && ctx.Err() == nil {
		if mayRetry {
			return sendStale, nil
		}
		if st.ep.died(err) {
			return sendDied, err
		}
	}
	resp, plain, err := readResponse(bc.br, r)
	for err == nil && resp.StatusCode < 200 {
		if resp.StatusCode == http.StatusSwitchingProtocols {
			if up != "" {
				x.switched(bc, resp, up)
				return sendDone, nil
			}
			err = errors.New("replica switched protocols unasked")
			break
		}
		resp, plain, err = readResponse(bc.br, r)
	}
	if err != nil {
		if ctx.Err() != nil {
			st.code = statusClientGone
		} else {
			x.fail(st, err)
		}
		return sendDone, nil
	}
	st.code, st.head = resp.StatusCode, x.p.clock.Now()
	st.ep.pool.answered(bc, resp)
	h := w.Header()
	conn := resp.Header["Connection"]
	for k, vs := range resp.Header {
		if passOn(k, conn) {
			h[k] = vs
		}
	}
	for k := range resp.Trailer {
		h.Add("Trailer", k)
	}
	if v := st.setCookie(); v != "" {
		h.Add("Set-Cookie", v)
	}
	if st.hsts {
		h.Set("Strict-Transport-Security", hstsValue)
	}
	w.WriteHeader(resp.StatusCode)
	flush := resp.ContentLength < 0 || strings.HasPrefix(resp.Header.Get("Content-Type"), "text/event-stream")
	complete, backendErr := copyBody(w, resp.Body, flush)
	if !complete {
		if backendErr && ctx.Err() == nil {
			// Cut the client's answer short rather than let it look whole.
			panic(http.ErrAbortHandler)
		}
		return sendDone, nil
	}
	resp.Body.Close()
	for k, vs := range resp.Trailer {
		h[http.TrailerPrefix+k] = vs
	}
	// Kept only when the answer ended where its unambiguous framing said,
	// with nothing after it (see fastReq.relay), and no upgrade was asked.
	keep = up == "" && !resp.Close && plain && bc.clean()
	return sendDone, nil
}

// copyBody copies an answer body to w, flushing after every read when the
// answer streams. complete says the body was read to its end and written;
// backendErr says reading it failed.
func copyBody(w http.ResponseWriter, body io.Reader, flush bool) (complete, backendErr bool) {
	bp := buffers.Get().(*[]byte)
	defer buffers.Put(bp)
	buf := *bp
	var f http.Flusher
	if flush {
		f, _ = w.(http.Flusher)
	}
	for {
		n, err := body.Read(buf)
		if n > 0 {
			if _, werr := w.Write(buf[:n]); werr != nil {
				return false, false
			}
			if f != nil {
				f.Flush()
			}
		}
		if err == io.EOF {
			return true, false
		}
		if err != nil {
			return false, true
		}
	}
}

// bodyError is a failure to read the client's request body.
type bodyError struct{ err error }

func (e *bodyError) Error() string { return "request body: " + e.err.Error() }
func (e *bodyError) Unwrap() error { return e.err }

// writeRequest writes r in HTTP/1.1 with the hop-by-hop fields removed,
// the forwarded fields written (appendForwarded, with what fw says of the
// client connection), and the hop header hop unless it is "". fromHop is
// set for a request another node's proxy sent, whose forwarded fields are
// kept. upgrade, unless "", is the protocol
// the request asks to switch to. A body of unknown length is streamed in
// chunked coding, each piece as it comes, its trailers after it.
func writeRequest(bw *bufio.Writer, r *http.Request, hop string, fw *forwarded, fromHop bool, upgrade string) error {
	uri := r.RequestURI
	if uri == "" || uri[0] != '/' {
		uri = r.URL.RequestURI()
	}
	bw.WriteString(r.Method)
	bw.WriteByte(' ')
	bw.WriteString(uri)
	bw.WriteString(" HTTP/1.1\r\nHost: ")
	bw.WriteString(r.Host)
	bw.WriteString("\r\n")
	conn := r.Header["Connection"]
	for k, vs := range r.Header {
		if !passOn(k, conn) || forwardedHeader(k) || k == "Content-Length" || k == "Expect" || k == HopHeader {
			continue
		}
		for _, v := range vs {
			bw.WriteString(k)
			bw.WriteString(": ")
			bw.WriteString(v)
			bw.WriteString("\r\n")
		}
	}
	h := r.Header
	sent := sentFields[string]{xff: h["X-Forwarded-For"], host: h["X-Forwarded-Host"],
		proto: h["X-Forwarded-Proto"], realIP: h["X-Real-Ip"], fwd: h["Forwarded"]}
	bw.Write(appendForwarded(bw.AvailableBuffer(), fw, r.Host, &sent, fromHop))
	chunked := r.ContentLength < 0 && r.Body != nil && r.Body != http.NoBody
	switch {
	case chunked:
		bw.WriteString("Transfer-Encoding: chunked\r\n")
		for k := range r.Trailer {
			bw.WriteString("Trailer: " + k + "\r\n")
		}
	case r.ContentLength > 0 || r.Method == "POST" || r.Method == "PUT" || r.Method == "PATCH":
		bw.WriteString("Content-Length: ")
		var num [20]byte
		bw.Write(strconv.AppendInt(num[:0], max(r.ContentLength, 0), 10))
		bw.WriteString("\r\n")
	}
	if upgrade != "" {
		bw.WriteString("Connection: Upgrade\r\nUpgrade: ")
		bw.WriteString(upgrade)
		bw.WriteString("\r\n")
	}
	if hop != "" {
		bw.WriteString(HopHeader + ": ")
		bw.WriteString(hop)
		bw.WriteString("\r\n")
	}
	bw.WriteString("\r\n")
	switch {
	case chunked:
		return writeChunked(bw, r)
	case r.ContentLength > 0:
		n, err := io.Copy(bw, r.Body)
		if err == nil && n < r.ContentLength {
			err = io.ErrUnexpectedEOF
		}
		if err != nil {
			return &bodyError{err: err}
		}
	}
	return bw.Flush()
}

// writeChunked streams r's body of unknown length to bw in chunked coding,
// each piece passed on as it is read, then its trailers.
func writeChunked(bw *bufio.Writer, r *http.Request) error {
	if err := bw.Flush(); err != nil {
		return err
	}
	bp := buffers.Get().(*[]byte)
	defer buffers.Put(bp)
	buf := *bp
	var num [20]byte
	for {
		n, err := r.Body.Read(buf)
		if n > 0 {
			bw.Write(strconv.AppendInt(num[:0], int64(n), 16))
			bw.WriteString("\r\n")
			bw.Write(buf[:n])
			bw.WriteString("\r\n")
			if werr := bw.Flush(); werr != nil {
				return werr
			}
		}
		if err == io.EOF {
			break
		}
		if err != nil {
			return &bodyError{err: err}
		}
	}
	bw.WriteString("0\r\n")
	for k, vs := range r.Trailer {
		if !passOn(k, nil) {
			continue
		}
		for _, v := range vs {
			bw.WriteString(k + ": " + v + "\r\n")
		}
	}
	bw.WriteString("\r\n")
	return bw.Flush()
}

// buffers lends the copies of bodies and upgraded connections their
// buffers.
var buffers = sync.Pool{New: func() any { b := make([]byte, 32<<10); return &b }}
