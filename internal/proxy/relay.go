package proxy

import (
	"bufio"
	"bytes"
	"errors"
	"io"
	"net/http"
	"net/http/httputil"
	"strconv"
)

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
func (x *fastReq) relay(bc *bconn, keepBackend *bool) outcome {
	c := x.c
	a := &x.ans
	var n int
	for {
		var err error
		if n, err = readAnswerHead(bc); err != nil {
			return x.failed(err)
		}
		if n == 0 {
			return x.relaySlow(bc, keepBackend)
		}
		head, _ := bc.br.Peek(n)
		if !a.parse(head) {
			return x.relaySlow(bc, keepBackend)
		}
		if a.code == http.StatusSwitchingProtocols {
			return x.failed(errors.New("replica switched protocols unasked"))
		}
		if a.code >= 200 {
			break
		}
		bc.br.Discard(n)
	}
	x.st.code, x.st.head = a.code, c.f.p.clock.Now()
	bc.ka = a.ka
	if a.stream {
		x.st.ep.pool.uncount(bc)
	}
	closing := x.req.close || c.f.shutting.Load()
	bodyless := x.req.isHead || a.code == http.StatusNoContent || a.code == http.StatusNotModified
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
	x.writeSetCookie()
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
	// A connection is kept only when the answer ended exactly where its
	// unambiguous framing said: not with both a length and chunked
	// coding, and with nothing after it (a body on a HEAD, 204 or 304
	// answer, bytes past the length).
	return x.finishAnswer(res, !a.close && !(a.chunked && a.cl >= 0) && bc.clean(), closing, keepBackend)
}

// writeSetCookie adds the sticky cookie to an answer head when it is due,
// and HSTS when the edge wants it.
func (x *fastReq) writeSetCookie() {
	c := x.c
	if v := x.st.setCookie(); v != "" {
		c.bw.WriteString("Set-Cookie: ")
		c.bw.WriteString(v)
		c.bw.WriteString("\r\n")
	}
	if x.st.hsts {
		c.bw.WriteString("Strict-Transport-Security: " + hstsValue + "\r\n")
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
func (x *fastReq) finishAnswer(res copyResult, backendReusable, closing bool, keepBackend *bool) outcome {
	c := x.c
	if res == copied {
		x.finish()
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
	if res == backendFailed && !c.w.gone.Load() && !x.st.ep.pool.isCut() {
		c.f.p.log.Warn("proxy: replica cut its answer short", "app", x.st.app.name, "endpoint", x.st.ep.id)
	}
	// The client's answer is cut short rather than made to look whole (a
	// replica's drain that ended with the answer unfinished cuts it too).
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
func (x *fastReq) relaySlow(bc *bconn, keepBackend *bool) outcome {
	c := x.c
	req := reqGET
	if x.req.isHead {
		req = reqHEAD
	}
	resp, plain, err := readResponse(bc.br, req)
	for err == nil && resp.StatusCode < 200 {
		if resp.StatusCode == http.StatusSwitchingProtocols {
			return x.failed(errors.New("replica switched protocols unasked"))
		}
		resp, plain, err = readResponse(bc.br, req)
	}
	if err != nil {
		return x.failed(err)
	}
	// resp.Body is not closed: Close would read the rest of an unfinished
	// body; the connection is closed instead.
	x.st.code, x.st.head = resp.StatusCode, c.f.p.clock.Now()
	x.st.ep.pool.answered(bc, resp)
	closing := x.req.close || c.f.shutting.Load()
	bodyless := x.req.isHead || resp.StatusCode == http.StatusNoContent || resp.StatusCode == http.StatusNotModified
	c.writeTimeout()
	c.bw.WriteString("HTTP/1.1 ")
	c.bw.WriteString(resp.Status)
	c.bw.WriteString("\r\n")
	conn := resp.Header["Connection"]
	for k, vs := range resp.Header {
		if !passOn(k, conn) || k == "Content-Length" {
			continue
		}
		for _, v := range vs {
			c.bw.WriteString(k)
			c.bw.WriteString(": ")
			c.bw.WriteString(v)
			c.bw.WriteString("\r\n")
		}
	}
	x.writeSetCookie()
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
	return x.finishAnswer(res, !resp.Close && plain && bc.clean(), closing, keepBackend)
}

// readResponse reads an answer with http.ReadResponse and tells whether
// its framing is plain (see plainFraming), so that the connection may
// carry another request once the answer was read to its end.
func readResponse(br *bufio.Reader, req *http.Request) (resp *http.Response, plain bool, err error) {
	plain = plainFraming(br)
	resp, err = http.ReadResponse(br, req)
	return resp, plain, err
}

// plainFraming waits until br holds a whole answer head and tells whether
// its framing is unambiguous: not both Content-Length and
// Transfer-Encoding, and no Transfer-Encoding in an answer other than
// HTTP/1.1, which RFC 9112 (6.1, 6.3) says to close the connection after.
// A head larger than br's buffer, or one that ends before its empty line,
// is not plain.
func plainFraming(br *bufio.Reader) bool {
	for {
		buf, _ := br.Peek(br.Buffered())
		if done, plain := scanFraming(buf); done {
			return plain
		}
		if len(buf) == br.Size() {
			return false
		}
		if _, err := br.Peek(len(buf) + 1); err != nil {
			return false
		}
	}
}

// scanFraming looks at the answer head at the start of b, whose lines end
// in LF or CRLF as net/http reads them: done when b holds it whole, plain
// as plainFraming says.
func scanFraming(b []byte) (done, plain bool) {
	first := true
	v11, cl, te := false, false, false
	for {
		i := bytes.IndexByte(b, '\n')
		if i < 0 {
			return false, false
		}
		line := trimEOL(b[:i+1])
		b = b[i+1:]
		if first {
			v11 = bytes.HasPrefix(line, []byte("HTTP/1.1 "))
			first = false
			continue
		}
		if len(line) == 0 {
			return true, !(te && (cl || !v11))
		}
		name, _, _ := bytes.Cut(line, []byte(":"))
		name = bytes.Trim(name, " \t")
		switch {
		case eqFold(name, "content-length"):
			cl = true
		case eqFold(name, "transfer-encoding"):
			te = true
		}
	}
}
