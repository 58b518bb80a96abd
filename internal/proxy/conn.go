package proxy

import (
	"bufio"
	"bytes"
	"crypto/tls"
	"errors"
	"io"
	"net"
	"net/http"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/shoal-run/shoal/internal/httperr"
)

// Sizes of a client connection's buffers. A request head must fit in the
// read buffer to take the fast path.
const (
	clientReadBuffer  = 8 << 10
	clientWriteBuffer = 4 << 10
	// inlineBody is the largest request body read before it is sent, so
	// that the request goes to the replica in one write and can be sent
	// again after a failed connect; larger bodies are streamed.
	inlineBody = 16 << 10
	// maxDrain is the largest unread request body skipped to keep a
	// connection after an error answer; beyond it the connection closes.
	maxDrain = 256 << 10
)

// States of a client connection, for Shutdown.
const (
	stateIdle int32 = iota
	stateActive
	stateClosed
)

var (
	readers = sync.Pool{New: func() any { return bufio.NewReaderSize(nil, clientReadBuffer) }}
	writers = sync.Pool{New: func() any { return bufio.NewWriterSize(nil, clientWriteBuffer) }}
)

func putReader(br *bufio.Reader) {
	br.Reset(nil)
	readers.Put(br)
}

// cconn is one client connection served by the fast path, in one
// goroutine: a request is read, forwarded on a pooled replica connection,
// and answered before the next is read.
type cconn struct {
	f     *server
	c     net.Conn
	br    *bufio.Reader
	bw    *bufio.Writer
	state atomic.Int32

	client string    // the client's address
	fw     forwarded // what the forwarded fields say of it
	tls    bool      // c is a *tls.Conn
	sni    string    // the server name its handshake asked for (TLS)

	rdl, wdl time.Time // deadlines set on c; the zero time when unknown
	long     []byte    // a head too long for br, read on for net/http

	num [20]byte // for formatting numbers without allocating
	w   watcher
	x   fastReq // the request being served
}

func newCconn(f *server, c net.Conn, client string) *cconn {
	_, isTLS := c.(*tls.Conn)
	cc := &cconn{f: f, c: c, client: client, fw: newForwarded(client, isTLS, f.p.trusted), tls: isTLS}
	cc.w.c = cc
	cc.x.c = cc
	return cc
}

// outcome is what becomes of a client connection after a request.
type outcome int

const (
	keepConn outcome = iota
	closeConn
	handOff
)

// errHandOff reports a request head the fast path leaves to net/http.
var errHandOff = errors.New("request for net/http")

func (c *cconn) serve() {
	if c.tls && !c.handshake() {
		return
	}
	c.br = readers.Get().(*bufio.Reader)
	c.br.Reset(c.c)
	c.bw = writers.Get().(*bufio.Writer)
	c.bw.Reset(c.c)
	handed := false
	defer func() {
		c.f.remove(c)
		c.bw.Reset(nil)
		writers.Put(c.bw)
		if !handed {
			c.c.Close()
			putReader(c.br)
			c.f.connGone(c.client)
		}
	}()
	for {
		c.state.Store(stateIdle)
		if c.f.shutting.Load() {
			return
		}
		c.readTimeout(c.f.timeouts.idle)
		if _, err := c.br.Peek(1); err != nil {
			return
		}
		if !c.state.CompareAndSwap(stateIdle, stateActive) {
			return
		}
		n, err := c.readHead()
		if err == errHandOff {
			handed = c.handOff()
			return
		}
		if he, ok := err.(*headError); ok {
			c.refuseHead(he)
			return
		}
		if err != nil {
			return
		}
		oc := c.x.serve(n)
		if cap(c.x.out) > 4<<10 {
			c.x.out = nil // a large body's buffer is not kept
		}
		switch oc {
		case handOff:
			handed = c.handOff()
			return
		case closeConn:
			return
		}
	}
}

// readHead waits for a whole request head in the read buffer and returns
// its length. A head that outgrows the buffer is read on into c.long, up
// to the head limit, and left to net/http (errHandOff); one over a limit
// is a *headError.
func (c *cconn) readHead() (int, error) {
	lim := &c.f.limits
	for slow := false; ; slow = true {
		buf, _ := c.br.Peek(c.br.Buffered())
		switch n := headEnd(buf); {
		case n > 0:
			if lim.MaxLineBytes < clientReadBuffer {
				var s headScan
				if _, code := s.scan(buf[:n], lim.MaxLineBytes); code != 0 {
					return 0, overLimit(code)
				}
			}
			return n, nil
		case n < 0:
			// Bare LFs: net/http reads the head. It is checked here as
			// far as it arrived.
			var s headScan
			if end, _ := s.scan(buf, len(buf)); end > 0 && clAndTE(buf[:end]) {
				return 0, errCLTE
			}
			return 0, errHandOff
		case len(buf) == c.br.Size():
			return 0, c.readLongHead()
		}
		if !slow {
			c.readTimeout(c.f.timeouts.header)
		}
		if _, err := c.br.Peek(len(buf) + 1); err != nil {
			return 0, err
		}
	}
}

// headError is a request head refused before it is parsed: answered with
// its code, then the connection closes.
type headError struct {
	code       int
	msg, field string
}

func (e *headError) Error() string { return e.msg }

// overLimit is the refusal of a head over a limit, code 414 or 431.
func overLimit(code int) *headError {
	if code == http.StatusRequestURITooLong {
		return &headError{code: code, msg: "request line is over the limit", field: "uri"}
	}
	return &headError{code: code, msg: "request head is over the limit", field: "head"}
}

// errCLTE refuses a request with both Content-Length and Transfer-Encoding
// (RFC 9112 section 6.1: a server may refuse it, and must close after it).
var errCLTE = &headError{code: http.StatusBadRequest, msg: "request has both Content-Length and Transfer-Encoding", field: "Transfer-Encoding"}

// readLongHead reads on a head that filled the read buffer into c.long,
// which grows up to the head limit, checking its lines as they come; the
// whole head then goes to net/http (errHandOff).
func (c *cconn) readLongHead() error {
	lim := &c.f.limits
	c.readTimeout(c.f.timeouts.header)
	n := c.br.Buffered()
	b := make([]byte, 0, min(2*clientReadBuffer, lim.MaxHeadBytes+1))
	buf, _ := c.br.Peek(n)
	b = append(b, buf...)
	c.br.Discard(n)
	var s headScan
	for {
		end, code := s.scan(b, lim.MaxLineBytes)
		switch {
		case code != 0:
			return overLimit(code)
		case end > lim.MaxHeadBytes || (end == 0 && len(b) > lim.MaxHeadBytes):
			return overLimit(http.StatusRequestHeaderFieldsTooLarge)
		case end > 0 && clAndTE(b[:end]):
			return errCLTE
		case end > 0:
			c.long = b
			return errHandOff
		}
		if len(b) == cap(b) {
			nb := make([]byte, len(b), min(2*cap(b), lim.MaxHeadBytes+1))
			copy(nb, b)
			b = nb
		}
		m, err := c.c.Read(b[len(b):cap(b)])
		b = b[:len(b)+m]
		if err != nil && m == 0 {
			return err
		}
	}
}

// refuseHead answers a refused head and closes the connection.
func (c *cconn) refuseHead(e *headError) {
	c.f.p.clientMistake("proxy: request refused", "remote", c.client, "status", e.code, "err", e.msg)
	ew := &errResponse{}
	httperr.Write(ew, e.code, errors.New(e.msg), e.field)
	c.writeStatus(e.code, http.StatusText(e.code))
	for k, vs := range ew.Header() {
		for _, v := range vs {
			c.bw.WriteString(k + ": " + v + "\r\n")
		}
	}
	c.bw.WriteString("Content-Length: " + strconv.Itoa(len(ew.body)) + "\r\nConnection: close\r\n\r\n")
	c.bw.Write(ew.body)
	if c.bw.Flush() == nil {
		c.lingerClose()
	}
}

// handOff gives the connection, with what was read of it, to net/http.
func (c *cconn) handOff() bool {
	c.c.SetDeadline(time.Time{})
	c.bw.Flush()
	client := c.client
	gone := &countedConn{gone: func() { c.f.connGone(client) }}
	to := c.f.handed
	if b, _ := c.br.Peek(c.br.Buffered()); bytes.HasPrefix(b, h2Preface) {
		to = c.f.h2handed
	}
	if !to.give(&handedConn{Conn: c.c, pre: c.long, br: c.br, io: c.f.timeouts.io, gone: gone}) {
		return false
	}
	return true
}

// readTimeout makes the next reads fail after d, moving the deadline only
// when it is too far off: too late, or more than an eighth of d early.
func (c *cconn) readTimeout(d time.Duration) {
	want := time.Now().Add(d)
	if c.rdl.After(want) || want.Sub(c.rdl) > d/8 {
		c.rdl = want
		c.c.SetReadDeadline(want)
	}
}

// writeTimeout bounds the next writes in the same way.
func (c *cconn) writeTimeout() {
	d := c.f.timeouts.io
	want := time.Now().Add(d)
	if want.Sub(c.wdl) > d/8 {
		c.wdl = want
		c.c.SetWriteDeadline(want)
	}
}

// skipBody discards an n-byte request body that was not forwarded and
// tells whether the connection can go on.
func (c *cconn) skipBody(n int64) bool {
	if n == 0 {
		return true
	}
	if n > maxDrain {
		return false
	}
	c.readTimeout(c.f.timeouts.io)
	_, err := c.br.Discard(int(n))
	return err == nil
}

// lingerClose half-closes the connection and reads what the client still
// sends for a moment before closing, so that an answer the client has not
// read yet is not lost to a reset.
func (c *cconn) lingerClose() {
	if tc, ok := c.c.(interface{ CloseWrite() error }); ok {
		tc.CloseWrite()
	}
	c.c.SetReadDeadline(time.Now().Add(500 * time.Millisecond))
	io.CopyN(io.Discard, c.c, maxDrain)
}

// writeStatus starts an answer to the client.
func (c *cconn) writeStatus(code int, text string) {
	c.writeTimeout()
	c.bw.WriteString("HTTP/1.1 ")
	c.bw.Write(strconv.AppendInt(c.num[:0], int64(code), 10))
	c.bw.WriteByte(' ')
	c.bw.WriteString(text)
	c.bw.WriteString("\r\n")
}
