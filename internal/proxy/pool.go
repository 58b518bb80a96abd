package proxy

import (
	"bufio"
	"context"
	"errors"
	"net"
	"net/http"
	"os"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"
	"unsafe"

	"golang.org/x/sys/unix"

	"github.com/shoal-run/shoal/internal/clock"
	"github.com/shoal-run/shoal/internal/route"
)

// DialTimeout bounds a connect to a replica; a replica that does not accept
// in this time is tried as failed and the request goes to another one.
const DialTimeout = time.Second

// maxIdlePerEndpoint bounds the idle keep-alive connections kept to one
// replica.
const maxIdlePerEndpoint = 512

// maxConnsPerEndpoint bounds the connections open to one replica of this
// node that carry requests (an upgraded WebSocket and an event stream no
// longer count); a request beyond it waits in the proxy, first come first
// served, for one to come back (see pool.get). A server that takes a
// connection per process or thread (Apache's prefork) leaves connections
// it has no worker for in its accept queue, where a request waits until a
// worker's keep-alive connection ends, while later requests are served on
// the connections it has; waiting here keeps them in order. A route's
// MaxConns (shoal.toml's [scale] max_connections) replaces it, for apps
// whose requests wait long (long polls).
const maxConnsPerEndpoint = route.DefaultMaxConns

// idleTimeout is how long a replica connection stays in the pool unused
// before it is closed.
const idleTimeout = 30 * time.Second

// keepAliveMargin is how much sooner than a replica's Keep-Alive timeout
// its idle connection is closed, so that a request is not sent on one the
// replica is closing.
const keepAliveMargin = time.Second

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
	// ka is how long the replica keeps the connection open unused, from
	// its last answer's Keep-Alive: timeout=N; 0 when it did not say.
	ka time.Duration
	// counted is set while the connection counts against
	// maxConnsPerEndpoint (guarded by the pool's mu).
	counted bool
	// ws is set while the connection carries an upgraded WebSocket,
	// which a cut ends with a close frame.
	ws atomic.Pointer[wsConn]
	// peekFn and the fields after it are the idle check's (alive), made
	// once per connection so that the check allocates nothing.
	peekFn func(fd uintptr) bool
	peekOK bool
	peek   [1]byte
}

// idleFor is how long bc may stay in the pool unused: idleTimeout, or less
// than the replica said it keeps it.
func (bc *bconn) idleFor() time.Duration {
	if bc.ka > 0 && bc.ka-keepAliveMargin < idleTimeout {
		return max(bc.ka-keepAliveMargin, bc.ka/2)
	}
	return idleTimeout
}

// pool holds the idle connections to one endpoint, most recently used last,
// and knows every connection it dialed that is still open, idle or in use,
// so that cut can close them all.
//
// A connection goes back to the pool only when its last answer ended
// exactly where its framing said (the callers' rule), and it is taken
// again only when it is still clean: nothing waiting to be read, not
// closed by the replica, and idle less than idleFor (idleTimeout, or less
// than the replica's Keep-Alive timeout). So an answer can never be read
// as the answer to the next request.
//
// With max set, at most max connections count (see maxConnsPerEndpoint):
// a request that finds none idle and max counted waits, in order of
// arrival, for one that comes back (handed to it straight away) or for a
// slot to dial.
type pool struct {
	clock  clock.Clock // nil: the wall clock
	dial   dialFunc    // nil: dialer's
	max    int         // counted connections at most; 0: no bound
	mu     sync.Mutex
	idle   []*bconn
	closed bool
	cut    bool                // no new connection until open
	live   map[*bconn]struct{} // open connections, idle or in use
	sweep  clock.Timer         // closes expired idle connections; nil when none is idle
	// sweepAt is when sweep fires; sweepGen tells its run from one it
	// replaced.
	sweepAt  time.Time
	sweepGen uint64
	// counted is how many connections count against max, those being
	// dialed included; waiters are the requests waiting, first first.
	counted int
	waiters []chan *bconn
}

// errCut is the connect error of an endpoint whose drain's grace is over.
var errCut = errors.New("the replica's drain is over")

var dialer = &net.Dialer{Timeout: DialTimeout, KeepAlive: 30 * time.Second}

// dialFunc connects to a replica: Options.Dial, or dialer's.
type dialFunc func(ctx context.Context, network, addr string) (net.Conn, error)

func (p *pool) now() time.Time {
	if p.clock == nil {
		return time.Now()
	}
	return p.clock.Now()
}

// get returns an idle connection that is still clean (see alive) and not
// expired, or dials a new one (always when fresh). With max connections
// counted it waits for one first (see pool), until ctx ends. A dial error
// is a *dialError.
func (p *pool) get(ctx context.Context, addr string, fresh bool) (*bconn, error) {
	var now time.Time
	for !fresh {
		p.mu.Lock()
		n := len(p.idle)
		if n == 0 {
			if p.max > 0 && p.counted >= p.max && !p.cut {
				ch := make(chan *bconn, 1)
				p.waiters = append(p.waiters, ch)
				p.mu.Unlock()
				bc, ok, err := p.wait(ctx, ch)
				if err != nil {
					return nil, err
				}
				if ok {
					if bc == nil {
						break // a slot to dial, counted for this request
					}
					if bc.alive() {
						bc.reused = true
						return bc, nil
					}
					p.dropKeepSlot(bc)
					break
				}
				continue
			}
			if p.max > 0 {
				p.counted++ // for the dial below
			}
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
		if now.Sub(bc.since) < bc.idleFor() && bc.alive() {
			bc.reused = true
			return bc, nil
		}
		p.drop(bc)
	}
	if fresh && p.max > 0 {
		p.mu.Lock()
		p.counted++
		p.mu.Unlock()
	}
	if p.isCut() {
		p.release()
		return nil, &dialError{err: errCut}
	}
	dial := p.dial
	if dial == nil {
		dial = dialer.DialContext
	}
	c, err := dial(ctx, "tcp", addr)
	if err != nil {
		p.release()
		return nil, &dialError{err: err}
	}
	bc := &bconn{c: c, bw: bufio.NewWriterSize(c, 8<<10), counted: p.max > 0}
	p.mu.Lock()
	if p.cut {
		p.mu.Unlock()
		p.release()
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

// wait waits on ch, a waiter of the pool, for a connection handed over
// (bc), or a slot to dial (nil), either with ok set; ok is false when the
// pool was cut or closed meanwhile (the caller looks again). It ends with
// ctx's error.
func (p *pool) wait(ctx context.Context, ch chan *bconn) (bc *bconn, ok bool, err error) {
	select {
	case bc, ok = <-ch:
		return bc, ok, nil
	case <-ctx.Done():
	}
	p.mu.Lock()
	for i, w := range p.waiters {
		if w == ch {
			p.waiters = append(p.waiters[:i], p.waiters[i+1:]...)
			p.mu.Unlock()
			return nil, false, ctx.Err()
		}
	}
	p.mu.Unlock()
	// Handed something as ctx ended: pass it on.
	if bc, ok = <-ch; ok {
		if bc == nil {
			p.release()
		} else {
			p.put(bc)
		}
	}
	return nil, false, ctx.Err()
}

// handLocked gives the first waiter bc (a connection to reuse) or nil (a
// slot to dial, already counted for it), and tells whether there was one.
func (p *pool) handLocked(bc *bconn) bool {
	if len(p.waiters) == 0 {
		return false
	}
	ch := p.waiters[0]
	p.waiters[0] = nil
	p.waiters = p.waiters[1:]
	ch <- bc
	return true
}

// release gives up a counted slot that was not used: the dial failed, or
// a connection no longer counts.
func (p *pool) release() {
	if p.max == 0 {
		return
	}
	p.mu.Lock()
	p.releaseLocked()
	p.mu.Unlock()
}

func (p *pool) releaseLocked() {
	if !p.handLocked(nil) && p.counted > 0 {
		p.counted--
	}
}

// answered notes of an answer on bc, read by net/http, what concerns the
// pool: the replica's Keep-Alive timeout, and whether it is an event
// stream (see uncount).
func (p *pool) answered(bc *bconn, resp *http.Response) {
	bc.ka = keepAliveTimeout(resp.Header["Keep-Alive"]...)
	if ct := resp.Header.Get("Content-Type"); len(ct) >= 17 && strings.EqualFold(ct[:17], "text/event-stream") {
		p.uncount(bc)
	}
}

// uncount stops bc counting against max: it carries an upgraded WebSocket
// or an event stream, open for as long as its client stays.
func (p *pool) uncount(bc *bconn) {
	if p.max == 0 {
		return
	}
	p.mu.Lock()
	if bc.counted {
		bc.counted = false
		p.releaseLocked()
	}
	p.mu.Unlock()
}

// dropKeepSlot closes bc, handed to a waiter but no longer clean, keeping
// its slot for the waiter's dial.
func (p *pool) dropKeepSlot(bc *bconn) {
	p.mu.Lock()
	delete(p.live, bc)
	bc.counted = false
	p.mu.Unlock()
	bc.c.Close()
}

// put returns a connection whose last answer was read exactly to its end:
// the caller checked that no byte of it is left over (see clean). The
// first waiter, if any, gets it at once.
func (p *pool) put(bc *bconn) {
	now := p.now()
	p.mu.Lock()
	if p.closed || (len(p.idle) >= maxIdlePerEndpoint && len(p.waiters) == 0) {
		p.forgetLocked(bc)
		p.mu.Unlock()
		bc.c.Close()
		return
	}
	bc.since = now
	if p.max > 0 && !bc.counted {
		// It carried an event stream: it counts again, if it may.
		if p.counted >= p.max {
			delete(p.live, bc)
			p.mu.Unlock()
			bc.c.Close()
			return
		}
		p.counted++
		bc.counted = true
	}
	if bc.counted && p.handLocked(bc) {
		p.mu.Unlock()
		return
	}
	p.idle = append(p.idle, bc)
	if d := bc.idleFor(); p.sweep == nil || now.Add(d).Before(p.sweepAt) {
		if p.sweep != nil {
			p.sweep.Stop()
		}
		p.armLocked(now, d)
	}
	p.mu.Unlock()
}

// forgetLocked takes bc, being closed, out of the pool's count.
func (p *pool) forgetLocked(bc *bconn) {
	delete(p.live, bc)
	if bc.counted {
		bc.counted = false
		p.releaseLocked()
	}
}

// armLocked starts the timer that closes the idle connections once they
// expire, d after now.
func (p *pool) armLocked(now time.Time, d time.Duration) {
	p.sweepGen++
	gen := p.sweepGen
	fn := func() { p.expire(gen) }
	p.sweepAt = now.Add(d)
	if p.clock == nil {
		p.sweep = clock.Real{}.AfterFunc(d, fn)
	} else {
		p.sweep = p.clock.AfterFunc(d, fn)
	}
}

// expire closes the idle connections unused for their idleFor and waits
// for the next to expire, while any is idle.
func (p *pool) expire(gen uint64) {
	now := p.now()
	p.mu.Lock()
	if gen != p.sweepGen {
		p.mu.Unlock() // replaced by an earlier one
		return
	}
	var old []*bconn
	next := time.Duration(-1)
	kept := p.idle[:0]
	for _, bc := range p.idle {
		left := bc.idleFor() - now.Sub(bc.since)
		if left <= 0 {
			old = append(old, bc)
			p.forgetLocked(bc)
			continue
		}
		if next < 0 || left < next {
			next = left
		}
		kept = append(kept, bc)
	}
	clear(p.idle[len(kept):])
	p.idle = kept
	p.sweep = nil
	if next >= 0 {
		p.armLocked(now, next)
	}
	p.mu.Unlock()
	for _, bc := range old {
		bc.c.Close()
	}
}

// drop closes a connection of the pool that is not kept.
func (p *pool) drop(bc *bconn) {
	p.mu.Lock()
	p.forgetLocked(bc)
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
		p.forgetLocked(bc)
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
	// The waiters look again and find the pool cut.
	for _, ch := range p.waiters {
		close(ch)
	}
	p.waiters, p.counted = nil, 0
	for bc := range live {
		bc.counted = false
	}
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
//
// A read deadline of the connection's last request (the fast path's, see
// watcher.attach, or the watcher's own once its client left after a whole
// answer) may have passed while it was idle: it is cleared, and the peek
// made again.
func (bc *bconn) alive() bool {
	if bc.br.Buffered() > 0 {
		return false
	}
	if bc.raw == nil {
		return true
	}
	bc.peekOK = false
	err := bc.raw.Read(bc.peekFn)
	if err != nil && errors.Is(err, os.ErrDeadlineExceeded) {
		bc.c.SetReadDeadline(time.Time{})
		bc.dl, bc.rdl = false, time.Time{}
		err = bc.raw.Read(bc.peekFn)
	}
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

// keepAliveTimeout is the timeout=N of Keep-Alive field values vs (RFC
// 2068's, as Apache sends it: "timeout=5, max=100"), or 0 when none says.
func keepAliveTimeout[T ~string | ~[]byte](vs ...T) time.Duration {
	for _, v := range vs {
		for i := 0; i < len(v); {
			for i < len(v) && (v[i] == ' ' || v[i] == '\t' || v[i] == ',') {
				i++
			}
			const name = "timeout="
			j := 0
			for j < len(name) && i+j < len(v) && v[i+j]|0x20 == name[j] {
				j++
			}
			if j == len(name) {
				n, k := 0, i+j
				for ; k < len(v) && v[k] >= '0' && v[k] <= '9' && n < 1e6; k++ {
					n = n*10 + int(v[k]-'0')
				}
				if k > i+j {
					return time.Duration(n) * time.Second
				}
			}
			for i < len(v) && v[i] != ',' {
				i++
			}
		}
	}
	return 0
}

// clean tells whether bc may go back to the pool after an answer whose
// framing was unambiguous and was read to its end: nothing more of the
// replica's is buffered.
func (bc *bconn) clean() bool { return bc.br.Buffered() == 0 }
