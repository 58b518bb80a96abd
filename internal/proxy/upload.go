package proxy

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"sync/atomic"
	"time"

	"github.com/shoal-run/shoal/internal/clock"
)

// Slow uploads: the first inlineBody bytes of a request body are read
// before the request is admitted, so that a trickled small body holds no
// in-flight slot, counts for no autoscaling and reaches no replica. From
// the body's start an upload guard checks, on the proxy's clock, that the
// body comes at Limits.MinUploadRate on average once Limits.UploadGrace
// is over (less the grace: a body may start slowly); a slower upload's
// connection is cut.

// uploadGuard watches one request body.
type uploadGuard struct {
	p       *Proxy
	start   time.Time
	got     atomic.Int64
	stopped atomic.Bool
	slow    atomic.Bool
	timer   clock.Timer
	cut     func()
}

// guardUpload starts a guard that calls cut when the body it is told of
// comes too slowly.
func (p *Proxy) guardUpload(cut func()) *uploadGuard {
	g := &uploadGuard{p: p, start: p.clock.Now(), cut: cut}
	g.timer = p.clock.AfterFunc(p.front.limits.UploadGrace, g.check)
	return g
}

func (g *uploadGuard) check() {
	defer g.p.front.guardChecks.Add(1)
	if g.stopped.Load() {
		return
	}
	l := &g.p.front.limits
	over := g.p.clock.Since(g.start) - l.UploadGrace
	if float64(g.got.Load()) < float64(l.MinUploadRate)*over.Seconds() {
		g.slow.Store(true)
		g.p.clientMistake("proxy: request body too slow, connection cut", "bytes", g.got.Load(), "after", over+l.UploadGrace)
		g.cut()
		return
	}
	g.timer.Reset(time.Second)
}

// add counts n bytes of the body.
func (g *uploadGuard) add(n int) {
	if g != nil {
		g.got.Add(int64(n))
	}
}

// stop ends the watch (the body was read).
func (g *uploadGuard) stop() {
	if g != nil {
		g.stopped.Store(true)
		g.timer.Stop()
	}
}

// errSlowUpload is the error of a body whose connection the guard cut.
var errSlowUpload = errors.New("request body came too slowly")

// bodyErr is the error to report for a failed body read.
func (g *uploadGuard) bodyErr(err error) error {
	if g != nil && g.slow.Load() {
		return errSlowUpload
	}
	return err
}

// guardedBody counts a request body's bytes for its guard and keeps its
// first read error: a body the client got wrong (a malformed chunk) or
// sent too slowly is the client's failure, not the replica's.
type guardedBody struct {
	rc  io.ReadCloser
	g   *uploadGuard
	pre []byte // read before admission, given out first
	err error
}

func (b *guardedBody) Read(p []byte) (int, error) {
	if len(b.pre) > 0 {
		n := copy(p, b.pre)
		b.pre = b.pre[n:]
		return n, nil
	}
	n, err := b.rc.Read(p)
	b.g.add(n)
	if err != nil && err != io.EOF && b.err == nil {
		b.err = b.g.bodyErr(err)
		err = b.err
	}
	return n, err
}

func (b *guardedBody) Close() error { return b.rc.Close() }

// readPrefix reads up to n bytes of the body before admission; err is
// set when the body could not be read (it is then over, with
// io.EOF not an error).
func (b *guardedBody) readPrefix(n int) error {
	buf := make([]byte, 0, min(n, 4<<10))
	for len(buf) < n {
		if len(buf) == cap(buf) {
			buf = append(buf, 0)[:len(buf)]
		}
		m, err := b.rc.Read(buf[len(buf):min(cap(buf), n)])
		b.g.add(m)
		buf = buf[:len(buf)+m]
		if err == io.EOF {
			break
		}
		if err != nil {
			b.err = b.g.bodyErr(err)
			return b.err
		}
	}
	b.pre = buf
	return nil
}

// connKey finds the client connection of a request net/http serves.
type connKey struct{}

func withConn(ctx context.Context, c net.Conn) context.Context {
	return context.WithValue(ctx, connKey{}, c)
}

// guardStdBody reads the first inlineBody bytes of a request body net/http
// read before the request is admitted, under an upload guard that cuts
// the client's connection should the body come too slowly. It returns a
// refusal when the body cannot be read.
func (p *Proxy) guardStdBody(r *http.Request, a *app) (*uploadGuard, *refusal) {
	if r.Body == nil || r.Body == http.NoBody || a == nil {
		return nil, nil
	}
	if rt := a.route.Load(); rt == nil || (rt.maxBody >= 0 && r.ContentLength > rt.maxBody) {
		return nil, nil // refused at once
	} else if rt.h2c || r.ProtoMajor == 2 {
		// An HTTP/2 stream (a gRPC call's messages) may wait for the
		// answer before it sends more; the client's streams are bounded
		// by the connection's stream limit instead.
		return nil, nil
	}
	c, _ := r.Context().Value(connKey{}).(net.Conn)
	g := p.guardUpload(func() {
		if c != nil {
			c.Close()
		}
	})
	b := &guardedBody{rc: r.Body, g: g}
	r.Body = b
	if err := b.readPrefix(inlineBody); err != nil {
		g.stop()
		return nil, p.badBody(r.RemoteAddr, err)
	}
	return g, nil
}

// badBody is the refusal of a request whose body the client got wrong,
// logged within the rate limit.
func (p *Proxy) badBody(remote string, err error) *refusal {
	p.clientMistake("proxy: request body refused", "remote", remote, "err", err)
	return &refusal{code: http.StatusBadRequest, err: fmt.Errorf("reading the request body: %w", err), field: "body", close: true}
}
