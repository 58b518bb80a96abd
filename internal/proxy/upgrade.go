package proxy

import (
	"fmt"
	"io"
	"net/http"
	"strings"

	"github.com/shoal-run/shoal/internal/route"
)

// Upgrades: a request that asks to switch protocols (Connection: Upgrade
// and an Upgrade value) goes to its replica on a connection of the
// endpoint's pool like any other, with Connection: Upgrade and its Upgrade
// value. When the replica answers 101 with that protocol, the client's
// connection is hijacked, the answer head passed on, and the two
// connections copied to each other until either side ends, which closes
// both. The request stays in flight meanwhile. The replica's connection
// stays in its pool's set of open connections, so the endpoint's cut ends
// it; a WebSocket's is followed frame by frame (wsConn) so that a cut, or
// its idle timeout, ends it with a close frame.

// upgradeType is the protocol a request asks to switch to: its Upgrade
// value when its Connection names upgrade, else "".
func upgradeType(h http.Header) string {
	if !listed(h["Connection"], "Upgrade") {
		return ""
	}
	return h.Get("Upgrade")
}

// switched serves a request whose replica answered resp, 101, on bc:
// want is the protocol the request asked for.
func (x *stdReq) switched(bc *bconn, resp *http.Response, want string) {
	st := &x.st
	got := resp.Header.Get("Upgrade")
	if !strings.EqualFold(got, want) {
		x.fail(st, fmt.Errorf("the replica switched to %q when %q was asked", got, want))
		return
	}
	client, brw, err := http.NewResponseController(x.w).Hijack()
	if err != nil {
		x.fail(st, fmt.Errorf("switching protocols: %w", err))
		return
	}
	defer client.Close()
	st.code, st.head = resp.StatusCode, x.p.clock.Now()
	st.ep.pool.uncount(bc) // it is the upgraded protocol's from now on
	var replica io.ReadWriteCloser = bconnIO{bc}
	if strings.EqualFold(got, "websocket") {
		ws := newWSConn(replica)
		idle := route.DefaultWebSocketTimeout
		if rt := st.app.route.Load(); rt != nil {
			idle = rt.wsTimeout
		}
		ws.closeIdle(x.p.clock, idle)
		bc.ws.Store(ws) // from now on a cut sends the close frame
		replica = ws
	}
	b := append(brw.Writer.AvailableBuffer(), "HTTP/1.1 "...)
	b = append(b, resp.Status...)
	b = append(b, "\r\n"...)
	conn := resp.Header["Connection"]
	for k, vs := range resp.Header {
		if !passOn(k, conn) {
			continue
		}
		for _, v := range vs {
			b = append(append(append(append(b, k...), ": "...), v...), "\r\n"...)
		}
	}
	b = append(b, "Connection: Upgrade\r\nUpgrade: "...)
	b = append(b, got...)
	b = append(b, "\r\n"...)
	if v := st.setCookie(); v != "" {
		b = append(append(append(b, "Set-Cookie: "...), v...), "\r\n"...)
	}
	if st.hsts {
		b = append(b, "Strict-Transport-Security: "+hstsValue+"\r\n"...)
	}
	b = append(b, "\r\n"...)
	brw.Writer.Write(b)
	if brw.Writer.Flush() != nil {
		replica.Close()
		return
	}
	done := make(chan struct{}, 2)
	go copyRaw(client, replica, done)
	go copyRaw(replica, brw.Reader, done)
	<-done
	client.Close()
	replica.Close()
	<-done
}

// copyRaw copies src to dst until either fails or src ends, then says so
// on done.
func copyRaw(dst io.Writer, src io.Reader, done chan<- struct{}) {
	bp := buffers.Get().(*[]byte)
	io.CopyBuffer(dst, src, *bp)
	buffers.Put(bp)
	done <- struct{}{}
}

// bconnIO is a replica connection carrying an upgraded protocol: reads
// start with what its reader holds past the 101 answer.
type bconnIO struct{ bc *bconn }

func (b bconnIO) Read(p []byte) (int, error)  { return b.bc.br.Read(p) }
func (b bconnIO) Write(p []byte) (int, error) { return b.bc.c.Write(p) }
func (b bconnIO) Close() error                { return b.bc.c.Close() }
