package proxy

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"strconv"
	"strings"
	"time"

	"github.com/shoal-run/shoal/internal/httperr"
)

// The direct path forwards a plain HTTP/1.x request of known body length on
// a pooled keep-alive connection, writing the request and reading the
// answer in the handler's own goroutine. Upgrades and chunked request
// bodies, which need both directions at once, go through the reverse proxy.

// direct tells whether r takes the direct path.
func direct(r *http.Request) bool {
	return r.ProtoMajor == 1 && r.ContentLength >= 0 && r.Header["Upgrade"] == nil
}

// aLongTimeAgo is a deadline that makes blocked I/O return at once.
var aLongTimeAgo = time.Unix(1, 0)

// forward sends r to st.ep, to other endpoints of the app when a connect
// fails, once more on a new connection when a reused one turns out closed
// before any answer to a request that is safe to repeat, and to other
// endpoints when the replica fails before any answer to an idempotent
// request without a body.
func (p *Proxy) forward(w http.ResponseWriter, r *http.Request, st *reqState) {
	ctx := r.Context()
	retryStale := r.ContentLength == 0 && (r.Method == "GET" || r.Method == "HEAD" || r.Method == "OPTIONS")
	retryDeath := r.ContentLength == 0 && idempotent(r.Method)
	deaths := 0
	fresh := false
	for {
		bc, err := st.ep.pool.get(ctx, st.ep.addr, fresh, !retryStale)
		if err != nil {
			if ctx.Err() != nil {
				st.code = statusClientGone
				return
			}
			if !p.retryOn(w, st, fmt.Errorf("app %q: %w (last: %w)", st.app.name, errNoReplica, err)) {
				return
			}
			fresh = false
			continue
		}
		res, err := p.exchange(w, r, st, bc, retryStale && bc.reused)
		switch res {
		case sendDone:
			return
		case sendStale:
			retryStale, fresh = false, true
		case sendDied:
			if !retryDeath || deaths >= maxDeathRetries {
				p.fail(w, st, err)
				return
			}
			deaths++
			if !p.retryOn(w, st, err) {
				return
			}
			retryStale = r.ContentLength == 0 && (r.Method == "GET" || r.Method == "HEAD" || r.Method == "OPTIONS")
			fresh = false
		}
	}
}

// idempotent tells whether a request with this method may be sent twice.
func idempotent(method string) bool {
	switch method {
	case "GET", "HEAD", "OPTIONS", "PUT", "DELETE", "TRACE":
		return true
	}
	return false
}

// retryOn moves the request from the endpoint that failed it to another
// one of the app. When there is none it answers with err and returns false.
func (p *Proxy) retryOn(w http.ResponseWriter, st *reqState, err error) bool {
	st.tried = append(st.tried, st.ep)
	next := st.app.pick(st.tried)
	if next == nil {
		p.fail(w, st, err)
		return false
	}
	st.app.m.retries.Inc()
	st.ep.done()
	st.ep = next
	return true
}

// exchange sends r on bc and copies the answer to w. mayRetry says that bc
// is a reused connection on which r may be sent again. When the replica
// fails before any byte of its answer, exchange writes nothing to w and
// reports sendDied with the error.
func (p *Proxy) exchange(w http.ResponseWriter, r *http.Request, st *reqState, bc *bconn, mayRetry bool) (sendResult, error) {
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
			bc.c.Close()
		}
	}()
	if err := writeRequest(bc.bw, r); err != nil {
		var be *bodyError
		switch {
		case mayRetry && !errors.As(err, &be):
			return sendStale, nil
		case ctx.Err() != nil:
			st.code = statusClientGone
		case errors.As(err, &be):
			st.code = http.StatusBadRequest
			httperr.Write(w, st.code, fmt.Errorf("reading the request body: %w", be.err), "body")
		case replicaDied(err):
			return sendDied, err
		default:
			p.fail(w, st, err)
		}
		return sendDone, nil
	}
	if _, err := bc.br.Peek(1); err != nil && ctx.Err() == nil {
		if mayRetry {
			return sendStale, nil
		}
		if replicaDied(err) {
			return sendDied, err
		}
	}
	resp, err := http.ReadResponse(bc.br, r)
	for err == nil && resp.StatusCode < 200 {
		if resp.StatusCode == http.StatusSwitchingProtocols {
			err = errors.New("replica switched protocols unasked")
			break
		}
		resp, err = http.ReadResponse(bc.br, r)
	}
	if err != nil {
		if ctx.Err() != nil {
			st.code = statusClientGone
		} else {
			p.fail(w, st, err)
		}
		return sendDone, nil
	}
	st.code = resp.StatusCode
	h := w.Header()
	for k, vs := range resp.Header {
		if !hopByHop(k) {
			h[k] = vs
		}
	}
	for k := range resp.Trailer {
		h.Add("Trailer", k)
	}
	if v := st.setCookie(); v != "" {
		h.Add("Set-Cookie", v)
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
	keep = !resp.Close
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

// writeRequest writes r in HTTP/1.1 with the hop-by-hop headers removed and
// X-Forwarded-For, -Host and -Proto set.
func writeRequest(bw *bufio.Writer, r *http.Request) error {
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
		if hopByHop(k) || skipRequestHeader(k) || listed(conn, k) {
			continue
		}
		for _, v := range vs {
			bw.WriteString(k)
			bw.WriteString(": ")
			bw.WriteString(v)
			bw.WriteString("\r\n")
		}
	}
	bw.WriteString("X-Forwarded-For: ")
	for _, v := range r.Header["X-Forwarded-For"] {
		bw.WriteString(v)
		bw.WriteString(", ")
	}
	client, _, err := net.SplitHostPort(r.RemoteAddr)
	if err != nil {
		client = r.RemoteAddr
	}
	bw.WriteString(client)
	bw.WriteString("\r\nX-Forwarded-Host: ")
	bw.WriteString(r.Host)
	if r.TLS != nil {
		bw.WriteString("\r\nX-Forwarded-Proto: https\r\n")
	} else {
		bw.WriteString("\r\nX-Forwarded-Proto: http\r\n")
	}
	if r.ContentLength > 0 || r.Method == "POST" || r.Method == "PUT" || r.Method == "PATCH" {
		bw.WriteString("Content-Length: ")
		var num [20]byte
		bw.Write(strconv.AppendInt(num[:0], r.ContentLength, 10))
		bw.WriteString("\r\n")
	}
	bw.WriteString("\r\n")
	if r.ContentLength > 0 {
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

// hopByHop tells whether a header belongs to one connection only.
func hopByHop(k string) bool {
	switch k {
	case "Connection", "Keep-Alive", "Proxy-Connection", "Proxy-Authenticate",
		"Proxy-Authorization", "Te", "Trailer", "Transfer-Encoding", "Upgrade":
		return true
	}
	return false
}

// skipRequestHeader tells whether a request header is replaced on the way.
func skipRequestHeader(k string) bool {
	switch k {
	case "X-Forwarded-For", "X-Forwarded-Host", "X-Forwarded-Proto", "Content-Length", "Expect":
		return true
	}
	return false
}

// listed tells whether the Connection header names k.
func listed(conn []string, k string) bool {
	for _, v := range conn {
		for tok := range strings.SplitSeq(v, ",") {
			if strings.EqualFold(strings.TrimSpace(tok), k) {
				return true
			}
		}
	}
	return false
}
