package proxy

import (
	"bufio"
	"context"
	"errors"
	"net"
	"sync"
	"syscall"
	"time"

	"golang.org/x/sys/unix"
)

// maxIdlePerEndpoint bounds the idle keep-alive connections kept to one
// replica.
const maxIdlePerEndpoint = 512

// bconn is a keep-alive HTTP/1.1 connection to a replica, used by one
// request at a time.
type bconn struct {
	c      net.Conn
	raw    syscall.RawConn
	br     *bufio.Reader
	bw     *bufio.Writer
	reused bool
	dl     bool      // a read deadline may be set
	rdl    time.Time // the read deadline the fast path set
	src    bsrc
	peek   [1]byte
}

// pool holds the idle connections to one endpoint, most recently used last,
// and knows every connection it dialed that is still open, idle or in use,
// so that cut can close them all.
type pool struct {
	mu     sync.Mutex
	idle   []*bconn
	closed bool
	cut    bool                // no new connection until open
	live   map[*bconn]struct{} // open connections, idle or in use
}

// errCut is the connect error of an endpoint whose drain's grace is over.
var errCut = errors.New("the replica's drain is over")

var dialer = &net.Dialer{Timeout: DialTimeout, KeepAlive: 30 * time.Second}

// get returns an idle connection, or dials a new one (always when fresh).
// Unless the caller can repeat its request on a closed connection (check
// false), an idle connection the replica has closed is skipped. A dial
// error is a *dialError.
func (p *pool) get(ctx context.Context, addr string, fresh, check bool) (*bconn, error) {
	for !fresh {
		p.mu.Lock()
		n := len(p.idle)
		if n == 0 {
			p.mu.Unlock()
			break
		}
		bc := p.idle[n-1]
		p.idle[n-1] = nil
		p.idle = p.idle[:n-1]
		p.mu.Unlock()
		if !check || bc.alive() {
			bc.reused = true
			return bc, nil
		}
		p.drop(bc)
	}
	if p.isCut() {
		return nil, &dialError{err: errCut}
	}
	c, err := dialer.DialContext(ctx, "tcp", addr)
	if err != nil {
		return nil, &dialError{err: err}
	}
	bc := &bconn{c: c, bw: bufio.NewWriterSize(c, 8<<10)}
	p.mu.Lock()
	if p.cut {
		p.mu.Unlock()
		c.Close()
		return nil, &dialError{err: errCut}
	}
	if p.live == nil {
		p.live = map[*bconn]struct{}{}
	}
	p.live[bc] = struct{}{}
	p.mu.Unlock()
	bc.src.bc = bc
	bc.br = bufio.NewReaderSize(&bc.src, 8<<10)
	if sc, ok := c.(syscall.Conn); ok {
		bc.raw, _ = sc.SyscallConn()
	}
	return bc, nil
}

// put returns a connection whose last answer was read to its end.
func (p *pool) put(bc *bconn) {
	p.mu.Lock()
	if p.closed || len(p.idle) >= maxIdlePerEndpoint {
		delete(p.live, bc)
		p.mu.Unlock()
		bc.c.Close()
		return
	}
	p.idle = append(p.idle, bc)
	p.mu.Unlock()
}

// drop closes a connection of the pool that is not kept.
func (p *pool) drop(bc *bconn) {
	p.mu.Lock()
	delete(p.live, bc)
	p.mu.Unlock()
	bc.c.Close()
}

// open lets the pool keep and dial connections again after close and cut.
func (p *pool) open() {
	p.mu.Lock()
	p.closed, p.cut = false, false
	p.mu.Unlock()
}

// close drops the idle connections and keeps no more.
func (p *pool) close() {
	p.mu.Lock()
	idle := p.idle
	p.idle = nil
	p.closed = true
	for _, bc := range idle {
		delete(p.live, bc)
	}
	p.mu.Unlock()
	for _, bc := range idle {
		bc.c.Close()
	}
}

// cutAll closes every connection of the pool, those in use too, whose
// requests then fail or see their answers end short, and dials no new one
// until open; it returns how many it closed.
func (p *pool) cutAll() int {
	p.mu.Lock()
	live := p.live
	p.live, p.idle = nil, nil
	p.closed, p.cut = true, true
	p.mu.Unlock()
	for bc := range live {
		bc.c.Close()
	}
	return len(live)
}

// isCut tells whether the pool's connections were cut (see cutAll).
func (p *pool) isCut() bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.cut
}

// alive tells whether an idle connection is still open: a peek that would
// block means the replica has neither closed it nor sent anything unasked.
func (bc *bconn) alive() bool {
	if bc.raw == nil {
		return true
	}
	if bc.br.Buffered() > 0 {
		return false
	}
	ok := false
	err := bc.raw.Read(func(fd uintptr) bool {
		_, _, err := unix.Recvfrom(int(fd), bc.peek[:], unix.MSG_PEEK|unix.MSG_DONTWAIT)
		ok = err == unix.EAGAIN
		return true
	})
	return err == nil && ok
}
