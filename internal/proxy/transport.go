package proxy

import (
	"context"
	"crypto/tls"
	"io"
	"net"
	"net/http"
	"sync"
	"time"

	"github.com/shoal-run/shoal/internal/route"
)

// DialTimeout bounds a connect to a replica; a replica that does not accept
// in this time is tried as failed and the request goes to another one.
const DialTimeout = time.Second

// NewTransport returns the transport the proxy shares for all replicas
// for what the reverse proxy forwards (upgrades, chunked uploads): HTTP/1.1
// only, no compression, no environment proxy, and a short connect timeout
// whose failures are marked so that they are retried on another replica.
// It keeps no idle connections: its pool cannot be checked clean before a
// reuse (its own reader consumes what a replica sends while a connection
// is idle), and a connection reused unclean would hand one client the
// answer meant for another. An upgraded connection is never reused anyway.
func NewTransport() *http.Transport {
	d := &net.Dialer{Timeout: DialTimeout, KeepAlive: 30 * time.Second}
	return &http.Transport{
		Proxy: nil,
		DialContext: func(ctx context.Context, network, addr string) (net.Conn, error) {
			c, err := d.DialContext(ctx, network, addr)
			if err != nil {
				return nil, &dialError{err: err}
			}
			return c, nil
		},
		DisableKeepAlives:     true,
		DisableCompression:    true,
		ForceAttemptHTTP2:     false,
		TLSNextProto:          map[string]func(string, *tls.Conn) http.RoundTripper{},
		ExpectContinueTimeout: time.Second,
		ReadBufferSize:        16 << 10,
		WriteBufferSize:       16 << 10,
	}
}

// director points the outbound request at the endpoint the request holds
// and sets X-Forwarded-Host and -Proto, X-Real-IP and Forwarded (the
// reverse proxy appends the client to X-Forwarded-For).
func director(out *http.Request) {
	st := stateOf(out)
	out.URL.Scheme = "http"
	out.URL.Host = st.ep.addr
	h := out.Header
	h["X-Forwarded-Host"] = []string{out.Host}
	proto := protoHTTP
	if out.TLS != nil {
		proto = protoHTTPS
	}
	h["X-Forwarded-Proto"] = proto
	if !st.hop || h["X-Real-Ip"] == nil {
		client := clientIP(out)
		h["X-Real-Ip"] = []string{client}
		h["Forwarded"] = []string{forwardedValue(client, proto[0])}
	}
	if out.Body != nil {
		st.body = &retryBody{rc: out.Body}
		out.Body = st.body
	}
}

// Header values shared by every request; they are only read.
var (
	protoHTTP  = []string{"http"}
	protoHTTPS = []string{"https"}
)

// retryTransport is the reverse proxy's transport: it sends a request to
// the endpoint it holds through the forwarder, which moves it to another
// endpoint of the app when the connect fails before anything was sent.
type retryTransport struct {
	p    *Proxy
	base http.RoundTripper
}

func (t *retryTransport) RoundTrip(req *http.Request) (*http.Response, error) {
	st := stateOf(req)
	if st == nil {
		return t.base.RoundTrip(req)
	}
	l := rtLeg{p: t.p, base: t.base, req: req}
	t.p.forward(st, &l, false, false, -1)
	return l.resp, l.err
}

// rtLeg is one request the reverse proxy sends, as the forwarder's leg.
type rtLeg struct {
	p    *Proxy
	base http.RoundTripper
	req  *http.Request
	resp *http.Response
	err  error
}

func (l *rtLeg) send(st *reqState, fresh, stale bool) (sendResult, error) {
	if st.upgrade != nil {
		st.upgrade.holdOn(st.ep)
	}
	req := l.req
	if st.ep.node != "" {
		req.Header[HopHeader] = []string{l.p.hopValue(st.ep, req.Host)}
	} else {
		delete(req.Header, HopHeader)
	}
	if req.URL.Host != st.ep.addr {
		r2 := new(http.Request)
		*r2 = *req
		u := *req.URL
		u.Host = st.ep.addr
		r2.URL = &u
		req = r2
	}
	resp, err := l.base.RoundTrip(req)
	if err != nil && isDialError(err) && (st.body == nil || !st.body.read) {
		return sendRefused, err
	}
	l.resp, l.err = resp, err
	return sendDone, nil
}

// fail hands err to the reverse proxy, whose error handler answers it.
func (l *rtLeg) fail(st *reqState, err error) { l.err = err }

func (l *rtLeg) gone(st *reqState) bool { return st.Context.Err() != nil }

// retryBody lets a request body survive a failed connect: the transport
// closes the body it was given on any error, and a retry needs it unread.
// The server closes the real body when the handler returns.
type retryBody struct {
	rc   io.ReadCloser
	read bool
}

func (b *retryBody) Read(p []byte) (int, error) {
	b.read = true
	return b.rc.Read(p)
}

func (b *retryBody) Close() error { return nil }

// modifyResponse records the status of the replica's answer and adds the
// sticky cookie when it is due. A WebSocket's connection to the replica is
// followed frame by frame, so that a cut at the end of a drain closes it
// with a close frame.
func (p *Proxy) modifyResponse(resp *http.Response) error {
	if st := stateOf(resp.Request); st != nil {
		st.code, st.head = resp.StatusCode, p.clock.Now()
		if v := st.setCookie(); v != "" {
			resp.Header.Add("Set-Cookie", v)
		}
		if rwc, ok := resp.Body.(io.ReadWriteCloser); ok && st.upgrade != nil && isWebSocket(resp) {
			ws := newWSConn(rwc)
			resp.Body = ws
			st.upgrade.ws.Store(ws)
			idle := route.DefaultWebSocketTimeout
			if rt := st.app.route.Load(); rt != nil {
				idle = rt.wsTimeout
			}
			ws.closeIdle(p.clock, idle)
		}
	}
	return nil
}

// errorHandler answers a request that the reverse proxy could not forward.
func (p *Proxy) errorHandler(w http.ResponseWriter, r *http.Request, err error) {
	p.failure(stateOf(r), err).write(w)
}

// bufferPool lends the reverse proxy its copy buffers.
type bufferPool struct{}

var buffers = sync.Pool{New: func() any { b := make([]byte, 32<<10); return &b }}

func (bufferPool) Get() []byte  { return *buffers.Get().(*[]byte) }
func (bufferPool) Put(b []byte) { buffers.Put(&b) }
