package proxy

import (
	"context"
	"errors"
	"net"
	"os"
	"sync"
	"sync/atomic"
	"time"
)

// watcher notices a client that hangs up while its request waits: for a
// replica's answer longer than watchAfter, or in the activation queue. It
// reads the client connection in a goroutine of its own, which the fast
// path otherwise avoids; bytes it reads (a pipelined request) stay in the
// connection's buffer. When the client is gone it cancels the queue wait
// and interrupts the read from the replica.
type watcher struct {
	c       *cconn
	running bool // owned by the connection's goroutine
	done    chan struct{}
	halt    atomic.Bool
	gone    atomic.Bool

	mu     sync.Mutex
	bc     net.Conn // the replica connection in use
	cancel context.CancelFunc
}

// start begins watching unless it already runs. The connection's goroutine
// must not read the client connection until stop.
func (w *watcher) start() {
	if w.running {
		return
	}
	w.running = true
	w.halt.Store(false)
	w.c.c.SetReadDeadline(time.Time{})
	w.c.rdl = time.Time{}
	w.done = make(chan struct{})
	go w.run()
}

func (w *watcher) run() {
	defer close(w.done)
	if _, err := w.c.br.Peek(1); err == nil || w.halt.Load() {
		return
	}
	w.gone.Store(true)
	w.mu.Lock()
	if w.cancel != nil {
		w.cancel()
	}
	if w.bc != nil {
		w.bc.SetReadDeadline(aLongTimeAgo)
	}
	w.mu.Unlock()
}

// pause ends the watching goroutine, so that the connection's goroutine
// may read the client connection; what it found stays known.
func (w *watcher) pause() {
	if w.running {
		w.halt.Store(true)
		w.c.c.SetReadDeadline(aLongTimeAgo)
		<-w.done
		w.running = false
		w.c.rdl = time.Time{}
	}
}

// stop ends watching, cancels the context of a request that was held
// (see fastReq.hold), and forgets the request's state.
func (w *watcher) stop() {
	w.pause()
	if w.cancel != nil {
		w.cancel()
		w.setCancel(nil)
	}
	w.gone.Store(false)
}

func (w *watcher) setCancel(cancel context.CancelFunc) {
	w.mu.Lock()
	w.cancel = cancel
	w.mu.Unlock()
}

// attach makes bc the replica connection to interrupt, and gives its reads
// a deadline between watchAfter/2 and watchAfter away (none when watching
// already).
func (w *watcher) attach(bc *bconn) {
	w.mu.Lock()
	w.bc = bc.c
	w.mu.Unlock()
	bc.src.w = w
	bc.dl = true
	switch {
	case w.running:
		if !bc.rdl.IsZero() {
			bc.rdl = time.Time{}
			bc.c.SetReadDeadline(bc.rdl)
		}
	default:
		// The deadline moves only when less than half of watchAfter is
		// left, so most requests do not touch it.
		if now := time.Now(); bc.rdl.Before(now.Add(watchAfter / 2)) {
			bc.rdl = now.Add(watchAfter)
			bc.c.SetReadDeadline(bc.rdl)
		}
	}
}

func (w *watcher) detach(bc *bconn) {
	w.mu.Lock()
	w.bc = nil
	w.mu.Unlock()
	bc.src.w = nil
}

// keepWaiting is called when a read from the replica timed out: it starts
// watching and tells whether to read on.
func (w *watcher) keepWaiting(bc *bconn) bool {
	if w.gone.Load() {
		return false
	}
	bc.rdl = time.Time{}
	bc.c.SetReadDeadline(bc.rdl)
	w.start()
	// The watcher sets gone before it moves the deadline: seeing it unset
	// here means a later hang-up still interrupts the read.
	return !w.gone.Load()
}

// bsrc is what a replica connection's reader reads: the connection, whose
// deadline, when a watcher is attached, starts the watcher.
type bsrc struct {
	bc *bconn
	w  *watcher
}

func (s *bsrc) Read(p []byte) (int, error) {
	n, err := s.bc.c.Read(p)
	for n == 0 && err != nil && s.w != nil && errors.Is(err, os.ErrDeadlineExceeded) && s.w.keepWaiting(s.bc) {
		n, err = s.bc.c.Read(p)
	}
	return n, err
}
