package proxy

import (
	"context"
	"net/http"
	"slices"
	"sync"
)

// h2pool holds the cleartext HTTP/2 (h2c, prior knowledge) connections to
// one replica whose route says route.ProtocolH2C: each carries many
// requests at once, up to the replica's SETTINGS_MAX_CONCURRENT_STREAMS,
// and a new one is dialed only when every open one is full (one dial at a
// time, which the others wait for). It follows the endpoint as the
// HTTP/1.1 pool does: close drops the connections with no stream open,
// cutAll closes every one, the streams on them too, and dials no more
// until open.
type h2pool struct {
	mu      sync.Mutex
	conns   []*http.ClientConn
	closed  bool
	cut     bool
	dialing chan struct{} // closed when the dial under way ends; nil when none is
}

// h2Transport makes the pools' connections: HTTP/2 without TLS only, dialed
// with the HTTP/1.1 pool's dialer. Its idle timeout closes a connection
// that carried no stream for idleTimeout.
var h2Transport = func() *http.Transport {
	var p http.Protocols
	p.SetUnencryptedHTTP2(true)
	return &http.Transport{
		Protocols:       &p,
		DialContext:     dialer.DialContext,
		IdleConnTimeout: idleTimeout,
		HTTP2: &http.HTTP2Config{
			MaxReadFrameSize:              64 << 10,
			MaxReceiveBufferPerConnection: 4 << 20,
			MaxReceiveBufferPerStream:     1 << 20,
		},
	}
}()

// get returns a connection with a stream reserved for the caller's
// RoundTrip, dialing one when none has room. A dial error is a
// *dialError, as is the refusal of a pool that was cut.
func (p *h2pool) get(ctx context.Context, addr string) (*http.ClientConn, error) {
	for {
		p.mu.Lock()
		if p.cut {
			p.mu.Unlock()
			return nil, &dialError{err: errCut}
		}
		p.conns = slices.DeleteFunc(p.conns, func(cc *http.ClientConn) bool { return cc.Err() != nil })
		for _, cc := range p.conns {
			if cc.Reserve() == nil {
				p.mu.Unlock()
				return cc, nil
			}
		}
		if ch := p.dialing; ch != nil {
			p.mu.Unlock()
			select {
			case <-ch:
				continue
			case <-ctx.Done():
				return nil, ctx.Err()
			}
		}
		ch := make(chan struct{})
		p.dialing = ch
		p.mu.Unlock()
		cc, err := h2Transport.NewClientConn(ctx, "http", addr)
		p.mu.Lock()
		p.dialing = nil
		close(ch)
		if err != nil {
			p.mu.Unlock()
			return nil, &dialError{err: err}
		}
		if p.cut {
			p.mu.Unlock()
			cc.Close()
			return nil, &dialError{err: errCut}
		}
		if err := cc.Reserve(); err != nil {
			p.mu.Unlock()
			cc.Close()
			return nil, &dialError{err: err}
		}
		p.conns = append(p.conns, cc)
		p.mu.Unlock()
		return cc, nil
	}
}

// done is called when a request reserved on cc ended: on a pool closed
// meanwhile, a connection without streams closes.
func (p *h2pool) done(cc *http.ClientConn) {
	p.mu.Lock()
	closed := p.closed
	p.mu.Unlock()
	if closed && cc.InFlight() == 0 {
		cc.Close()
	}
}

// open lets the pool dial and keep connections again.
func (p *h2pool) open() {
	p.mu.Lock()
	p.closed, p.cut = false, false
	p.mu.Unlock()
}

// close closes the connections that carry no stream; the others close
// when their last stream ends (see done).
func (p *h2pool) close() {
	p.mu.Lock()
	p.closed = true
	var idle []*http.ClientConn
	p.conns = slices.DeleteFunc(p.conns, func(cc *http.ClientConn) bool {
		if cc.InFlight() == 0 {
			idle = append(idle, cc)
			return true
		}
		return false
	})
	p.mu.Unlock()
	for _, cc := range idle {
		cc.Close()
	}
}

// cutAll closes every connection, their streams too, and dials no more
// until open; it returns how many it closed.
func (p *h2pool) cutAll() int {
	p.mu.Lock()
	conns := p.conns
	p.conns = nil
	p.closed, p.cut = true, true
	p.mu.Unlock()
	for _, cc := range conns {
		cc.Close()
	}
	return len(conns)
}

// isCut tells whether the pool's connections were cut.
func (p *h2pool) isCut() bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.cut
}
