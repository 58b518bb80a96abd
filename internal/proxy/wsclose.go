package proxy

import (
	"io"
	"net"
	"sync"
	"sync/atomic"
	"time"

	"github.com/shoal-run/shoal/internal/clock"
)

// A WebSocket cut at the end of its replica's drain ends with a close frame
// from the proxy, status 1001 (going away), before the client's connection
// closes: the client learns that the server went away on purpose rather
// than seeing the connection drop. The proxy copies the replica's side as
// raw bytes; wsConn follows its frame heads so that the close frame goes
// out between two frames, never inside one.

// goingAway is the close frame the proxy sends: unmasked (server to
// client), FIN and opcode 8, status 1001 and a short reason; idleAway the
// one for a WebSocket closed for being idle.
var (
	goingAway = closeFrame("the replica left service")
	idleAway  = closeFrame("idle timeout")
)

func closeFrame(reason string) []byte {
	b := []byte{0x88, byte(2 + len(reason)), 0x03, 0xe9}
	return append(b, reason...)
}

// wsCloseWait bounds how long the client's side waits, once the WebSocket
// is cut, for the close frame to be written before it stops.
const wsCloseWait = time.Second

// wsConn is the replica's side of an upgraded WebSocket as the upgrade leg
// copies it: Read carries the replica's frames to the client, Write the
// client's to the replica.
type wsConn struct {
	io.ReadWriteCloser // the replica's connection

	gone atomic.Bool // cut: the close frame is due
	bye  []byte      // the close frame; set before gone
	cut  sync.Once
	done chan struct{} // closed once the replica's side is over
	once sync.Once

	// Idle timeout: last is when a byte last passed either way (unix
	// nanoseconds on clk), idle the timer that checks it.
	clk     clock.Clock
	last    atomic.Int64
	idleFor time.Duration
	idle    clock.Timer

	// Owned by the reading goroutine: where the replica's stream is.
	head   [14]byte // a frame head read in part
	nhead  int
	left   uint64 // payload bytes of the current frame still to come
	closed bool   // the replica sent a close frame itself
	sent   bool   // the proxy's close frame was handed out
}

func newWSConn(rwc io.ReadWriteCloser) *wsConn {
	return &wsConn{ReadWriteCloser: rwc, done: make(chan struct{})}
}

// goAway cuts the WebSocket: the replica's connection closes, and the
// reading side hands out the close frame in its place.
func (w *wsConn) goAway() { w.goAwayWith(goingAway) }

func (w *wsConn) goAwayWith(frame []byte) {
	w.cut.Do(func() {
		w.bye = frame
		w.gone.Store(true)
		w.ReadWriteCloser.Close()
	})
}

// closeIdle cuts the WebSocket, with the idle close frame, once nothing
// passed through it for d on c.
func (w *wsConn) closeIdle(c clock.Clock, d time.Duration) {
	w.clk, w.idleFor = c, d
	w.last.Store(c.Now().UnixNano())
	w.idle = c.AfterFunc(d, w.checkIdle)
}

func (w *wsConn) checkIdle() {
	quiet := w.clk.Since(time.Unix(0, w.last.Load()))
	if quiet >= w.idleFor {
		w.goAwayWith(idleAway)
		return
	}
	select {
	case <-w.done:
	default:
		w.idle.Reset(w.idleFor - quiet)
	}
}

// active notes that bytes passed.
func (w *wsConn) active() {
	if w.clk != nil {
		w.last.Store(w.clk.Now().UnixNano())
	}
}

func (w *wsConn) Read(p []byte) (int, error) {
	if w.sent {
		// The close frame was written: the client's side is over.
		w.over()
		return 0, io.EOF
	}
	n, err := w.ReadWriteCloser.Read(p)
	if n > 0 {
		w.active()
		w.follow(p[:n])
		return n, nil // an error comes again on the next read
	}
	if err != nil && w.gone.Load() && w.nhead == 0 && w.left == 0 && !w.closed && len(p) >= len(w.bye) {
		w.sent = true
		return copy(p, w.bye), nil
	}
	if err != nil {
		w.over()
	}
	return n, err
}

// Write passes the client's bytes on to the replica. Once the WebSocket is
// cut it fails, but not before the close frame is out (or wsCloseWait has
// passed): the failure ends the proxying, which closes the client's
// connection.
func (w *wsConn) Write(p []byte) (int, error) {
	if w.gone.Load() {
		select {
		case <-w.done:
		case <-time.After(wsCloseWait):
		}
		return 0, net.ErrClosed
	}
	w.active()
	return w.ReadWriteCloser.Write(p)
}

func (w *wsConn) over() {
	w.once.Do(func() {
		close(w.done)
		if w.idle != nil {
			w.idle.Stop()
		}
	})
}

// follow moves the frame position past b, bytes the replica sent.
func (w *wsConn) follow(b []byte) {
	for len(b) > 0 {
		if w.left > 0 {
			k := min(uint64(len(b)), w.left)
			w.left -= k
			b = b[k:]
			continue
		}
		w.head[w.nhead] = b[0]
		w.nhead++
		b = b[1:]
		if w.nhead < 2 || w.nhead < headSize(w.head[1]) {
			continue
		}
		w.left = payloadLen(w.head[:w.nhead])
		if w.head[0]&0x0f == 0x8 {
			w.closed = true
		}
		w.nhead = 0
	}
}

// headSize is the length of a frame head whose second byte is b1.
func headSize(b1 byte) int {
	n := 2
	switch b1 & 0x7f {
	case 126:
		n += 2
	case 127:
		n += 8
	}
	if b1&0x80 != 0 {
		n += 4 // masking key
	}
	return n
}

// payloadLen reads the payload length of a whole frame head.
func payloadLen(h []byte) uint64 {
	switch l := h[1] & 0x7f; l {
	case 126:
		return uint64(h[2])<<8 | uint64(h[3])
	case 127:
		var n uint64
		for _, c := range h[2:10] {
			n = n<<8 | uint64(c)
		}
		return n
	default:
		return uint64(l)
	}
}
