package proxy

import (
	"bufio"
	"context"
	"errors"
	"net"
	"sync"
	"sync/atomic"
	"syscall"
	"time"
	"unsafe"

	"golang.org/x/sys/unix"

	"github.com/shoal-run/shoal/internal/clock"
)

// DialTimeout bounds a connect to a replica; a replica that does not accept
// in this time is tried as failed and the request goes to another one.
const DialTimeout = time.Second

// maxIdlePerEndpoint bounds the idle keep-alive connections kept to one
// replica.
const maxIdlePerEndpoint = 512

// idleTimeout is how long a replica connection stays in the pool unused
// before it is closed.
const idleTimeout = 30 * time.Second

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
	since  time.Time // when it was put in the pool
	// ws is set while the connection carries an upgraded WebSocket,
	// which a cut ends with a close frame.
	ws atomic.Pointer[wsConn]
	// peekFn and the fields after it are the idle check's (alive), made
	// once per connection so that the check allocates nothing.
	peekFn func(fd uintptr) bool
	peekOK bool
	peek   [1]byte
}

// pool holds the idle connections to one endpoint, most recently used last,
// and knows every connection it dialed that is still open, idle or in use,
// so that cut can close them all.
//
// A connection goes back to the pool only when its last answer ended
// exactly where its framing said (the callers' rule), and it is taken
// again only when it is still clean: nothing waiting to be read, not
// closed by the replica, and idle less than idleTimeout. So an answer can
// never be read as the answer to the next request.
type pool struct {
	clock  clock.Clock // nil: the wall clock
	mu     sync.Mutex
	idle   []*bconn
	closed bool
	cut    bool                // no new connection until open
	live   map[*bconn]struct{} // open connections, idle or in use
	sweep  clock.Timer         // closes expired idle connections; nil when none is idle
}

// errCut is the connect error of an endpoint whose drain's grace is over.
var errCut = errors.New("the replica's drain is over")

var dialer = &net.Dialer{Timeout: DialTimeout, KeepAlive: 30 * time.Second}

func (p *pool) now() time.Time {
	if p.clock == nil {
		return time.Now()
	}
	return p.clock.Now()
}

// get returns an idle connection that is still clean (see alive) and not
// expired, or dials a new one (always when fresh). A dial error is a
// *dialError.
func (p *pool) get(ctx context.Context, addr string, fresh bool) (*bconn, error) {
	var now time.Time
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
		if now.IsZero() {
			now = p.now()
		}
		if now.Sub(bc.since) < idleTimeout && bc.alive() {
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
		bc.peekFn = bc.peekIdle
	}
	return bc, nil
}

// put returns a connection whose last answer was read exactly to its end:
// the caller checked that no byte of it is left over (see clean).
func (p *pool) put(bc *bconn) {
	now := p.now()
	p.mu.Lock()
	if p.closed || len(p.idle) >= maxIdlePerEndpoint {
		delete(p.live, bc)
		p.mu.Unlock()
		bc.c.Close()
		return
	}
	bc.since = now
	p.idle = append(p.idle, bc)
	if p.sweep == nil {
		p.armLocked(idleTimeout)
	}
	p.mu.Unlock()
}

// armLocked starts the timer that closes the idle connections once they
// expire.
func (p *pool) armLocked(d time.Duration) {
	if p.clock == nil {
		p.sweep = clock.Real{}.AfterFunc(d, p.expire)
	} else {
		p.sweep = p.clock.AfterFunc(d, p.expire)
	}
}

// expire closes the idle connections unused for idleTimeout and waits for
// the next to expire, while any is idle.
func (p *pool) expire() {
	now := p.now()
	p.mu.Lock()
	n := 0
	for n < len(p.idle) && now.Sub(p.idle[n].since) >= idleTimeout {
		n++
	}
	old := make([]*bconn, n)
	copy(old, p.idle[:n])
	rest := copy(p.idle, p.idle[n:])
	clear(p.idle[rest:])
	p.idle = p.idle[:rest]
	for _, bc := range old {
		delete(p.live, bc)
	}
	p.sweep = nil
	if len(p.idle) > 0 {
		p.armLocked(idleTimeout - now.Sub(p.idle[0].since))
	}
	p.mu.Unlock()
	for _, bc := range old {
		bc.c.Close()
	}
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
// requests then fail or see their answers end short (an upgraded
// WebSocket gets its close frame), and dials no new one until open; it
// returns how many it closed.
func (p *pool) cutAll() int {
	p.mu.Lock()
	live := p.live
	p.live, p.idle = nil, nil
	p.closed, p.cut = true, true
	p.mu.Unlock()
	for bc := range live {
		if ws := bc.ws.Load(); ws != nil {
			ws.goAway()
		} else {
			bc.c.Close()
		}
	}
	return len(live)
}

// isCut tells whether the pool's connections were cut (see cutAll).
func (p *pool) isCut() bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.cut
}

// alive tells whether an idle connection is clean: nothing buffered, and a
// peek that would block, so the replica has neither closed it nor sent
// anything unasked (a stray answer, the rest of a body, a 408). It costs
// one non-blocking system call and allocates nothing.
func (bc *bconn) alive() bool {
	if bc.br.Buffered() > 0 {
		return false
	}
	if bc.raw == nil {
		return true
	}
	bc.peekOK = false
	err := bc.raw.Read(bc.peekFn)
	return err == nil && bc.peekOK
}

// peekIdle is alive's look at the socket: peekOK is set when there is
// nothing to read yet. It never waits for the socket (it returns true).
func (bc *bconn) peekIdle(fd uintptr) bool {
	for {
		_, _, errno := unix.Syscall6(unix.SYS_RECVFROM, fd, uintptr(unsafe.Pointer(&bc.peek[0])), 1,
			unix.MSG_PEEK|unix.MSG_DONTWAIT, 0, 0)
		if errno == unix.EINTR {
			continue
		}
		bc.peekOK = errno == unix.EAGAIN
		return true
	}
}

// clean tells whether bc may go back to the pool after an answer whose
// framing was unambiguous and was read to its end: nothing more of the
// replica's is buffered.
func (bc *bconn) clean() bool { return bc.br.Buffered() == 0 }
