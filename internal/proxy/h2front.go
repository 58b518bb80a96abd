package proxy

import (
	"context"
	"net"
	"net/http"
	"sync"
	"time"
)

// HTTP/2 from clients. On the plain listener a connection that opens with
// HTTP/2's preface ("PRI * HTTP/2.0", h2c with prior knowledge; always on)
// is handed, as the fast path hands every request it does not take, to a
// net/http server of its own (f.h2), which speaks HTTP/2 on it with the
// limits below; so is a TLS connection that agreed on ALPN "h2" (SetALPN,
// serveH2), past its handshake, where the same preface comes; its streams run ServeHTTP like any request of net/http's (the
// same admission, forwarder and metrics). What one connection may cost is
// bounded:
//   - at most h2MaxStreams streams at once (SETTINGS_MAX_CONCURRENT_STREAMS),
//     and frames of at most h2MaxFrame bytes;
//   - a request's header list within the head limit (Limits.MaxHeadBytes,
//     SETTINGS_MAX_HEADER_LIST_SIZE); net/http closes a connection that
//     goes on sending CONTINUATION frames past it (CVE-2023-45288);
//   - streams the client resets before their answer (rapid reset,
//     CVE-2023-44487): net/http runs no more handlers than the stream
//     limit and closes a connection whose queue of streams waiting for
//     one grows past four times it (GOAWAY, ENHANCE_YOUR_CALM); beyond
//     that a connection may reset h2ResetBurst streams at once and
//     h2ResetRate a second on average, else it is closed (resetBudget).
const (
	h2MaxStreams = 128
	h2MaxFrame   = 16 << 10
	h2ResetBurst = 256
	h2ResetRate  = 64
)

// h2Preface is how an HTTP/2 connection with prior knowledge opens, as far
// as the fast path reads it (a head ending in an empty line).
var h2Preface = []byte("PRI * HTTP/2.0\r\n\r\n")

// initH2 makes the net/http server of the connections that open with
// h2Preface: HTTP/2 only, with the limits above. (net/http's own check for
// the preface, on f.std, would hold a shorter malformed request until more
// bytes came.)
func (f *server) initH2() {
	var p http.Protocols
	p.SetUnencryptedHTTP2(true)
	f.h2handed = &handoffListener{conns: make(chan net.Conn), done: make(chan struct{})}
	f.h2 = &http.Server{
		Handler:        f.p,
		Protocols:      &p,
		IdleTimeout:    f.std.IdleTimeout,
		MaxHeaderBytes: f.std.MaxHeaderBytes,
		ConnContext:    connContext,
		ErrorLog:       f.std.ErrorLog,
		HTTP2: &http.HTTP2Config{
			MaxConcurrentStreams: h2MaxStreams,
			MaxReadFrameSize:     h2MaxFrame,
			WriteByteTimeout:     ioTimeout,
		},
	}
}

// serveH2 serves a TLS connection that agreed on "h2": HTTP/2 in f.h2,
// whose requests see it as TLS (requestTLS). Closing it ends its count
// against the client's connections (alpnConn).
func (f *server) serveH2(c net.Conn) {
	if !f.h2handed.give(&handedConn{Conn: c, io: f.timeouts.io}) {
		c.Close()
	}
}

// resetBudget is a client connection's allowance of streams reset before
// their answer: a token bucket of h2ResetBurst, refilled at h2ResetRate a
// second.
type resetBudget struct {
	mu     sync.Mutex
	tokens float64
	at     time.Time
}

// take spends one token at now and tells whether one was left.
func (b *resetBudget) take(now time.Time) bool {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.at.IsZero() {
		b.tokens = h2ResetBurst
	} else {
		b.tokens = min(h2ResetBurst, b.tokens+now.Sub(b.at).Seconds()*h2ResetRate)
	}
	b.at = now
	if b.tokens < 1 {
		return false
	}
	b.tokens--
	return true
}

// budgetKey finds a client connection's resetBudget in a request's context.
type budgetKey struct{}

// connContext is net/http's ConnContext: the connection (withConn) and its
// reset budget.
func connContext(ctx context.Context, c net.Conn) context.Context {
	return context.WithValue(withConn(ctx, c), budgetKey{}, &resetBudget{})
}

// streamEnded counts an HTTP/2 request the client reset before its
// handler was done (its context ended first) against its connection's
// budget, and closes the connection when none is left.
func (p *Proxy) streamEnded(r *http.Request) {
	if r.ProtoMajor != 2 || r.Context().Err() == nil {
		return
	}
	b, _ := r.Context().Value(budgetKey{}).(*resetBudget)
	if b == nil || b.take(p.clock.Now()) {
		return
	}
	p.clientMistake("proxy: HTTP/2 client reset too many streams, connection closed", "remote", r.RemoteAddr)
	if c, ok := r.Context().Value(connKey{}).(net.Conn); ok {
		c.Close()
	}
}
