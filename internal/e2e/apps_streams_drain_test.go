package e2e

import (
	"bufio"
	"encoding/binary"
	"fmt"
	"io"
	"net"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/shoal-run/shoal/internal/api/types"
)

// rawWS is a WebSocket client that sees every frame, close frames too.
type rawWS struct {
	c  net.Conn
	br *bufio.Reader
}

// dialRawWS opens a WebSocket to hello's /ws through the proxy.
func dialRawWS(t *testing.T, proxy string) *rawWS {
	t.Helper()
	c, err := net.Dial("tcp", proxy)
	if err != nil {
		t.Fatalf("dial the proxy: %v", err)
	}
	t.Cleanup(func() { c.Close() })
	fmt.Fprint(c, "GET /ws HTTP/1.1\r\nHost: hello.localhost\r\nConnection: Upgrade\r\nUpgrade: websocket\r\n"+
		"Origin: http://hello.localhost/\r\nSec-WebSocket-Version: 13\r\nSec-WebSocket-Key: c2hvYWwgc3RyZWFtcyB0ZXN0==\r\n\r\n")
	br := bufio.NewReader(c)
	resp, err := http.ReadResponse(br, nil)
	if err != nil || resp.StatusCode != http.StatusSwitchingProtocols {
		t.Fatalf("WebSocket handshake through the proxy: %v %v", resp, err)
	}
	return &rawWS{c: c, br: br}
}

// send writes a masked text frame.
func (w *rawWS) send(t *testing.T, msg string) {
	t.Helper()
	mask := [4]byte{7, 1, 8, 2}
	b := append([]byte{0x81, 0x80 | byte(len(msg))}, mask[:]...)
	for i := range len(msg) {
		b = append(b, msg[i]^mask[i%4])
	}
	if _, err := w.c.Write(b); err != nil {
		t.Fatalf("WebSocket send: %v", err)
	}
}

// read reads one frame: its opcode and payload.
func (w *rawWS) read() (byte, []byte, error) {
	var h [2]byte
	if _, err := io.ReadFull(w.br, h[:]); err != nil {
		return 0, nil, err
	}
	n := int(h[1] & 0x7f)
	if n == 126 {
		var l [2]byte
		if _, err := io.ReadFull(w.br, l[:]); err != nil {
			return 0, nil, err
		}
		n = int(binary.BigEndian.Uint16(l[:]))
	}
	p := make([]byte, n)
	_, err := io.ReadFull(w.br, p)
	return h[0] & 0x0f, p, err
}

// A WebSocket and an SSE stream still open when their replica's
// drain_timeout is over (a rollout took it out of the route) are ended by
// the proxy: the SSE stream's body is cut short, and the WebSocket gets a
// close frame with status 1001 (going away) before its connection closes.
// Until then both flow.
func TestStreamsEndedAfterDrainTimeout(t *testing.T) {
	d := startDaemon(t)
	d.exampleImage("hello")
	drain := func(greeting string) string {
		return strings.Replace(revManifest(1, greeting), `idle_timeout = "10m"`, "idle_timeout = \"10m\"\ndrain_timeout = \"2s\"", 1)
	}
	if r, _ := d.deployFile(drain("v1")); r.code != 0 {
		t.Fatalf("deploy revision 1: %d %s", r.code, r.stderr)
	}
	d.waitApp("hello", "revision 1 ready", func(a types.App) bool { return len(pids(a, 1, "ready")) == 1 })
	proxy := d.proxyAddr()
	ws := dialRawWS(t, proxy)
	ws.send(t, "one")
	if op, p, err := ws.read(); err != nil || op != 1 || !strings.HasPrefix(string(p), "one from ") {
		t.Fatalf("WebSocket echo: %d %q %v", op, p, err)
	}
	s := openSSE(t, proxy)
	s.flows(t, "before the rollout")

	if r, _ := d.deployFile(drain("v2")); r.code != 0 {
		t.Fatalf("deploy revision 2: exit %d\n%s%s", r.code, r.stdout, r.stderr)
	}
	select {
	case err := <-s.ended:
		if err == nil || !strings.Contains(err.Error(), "unexpected EOF") {
			t.Fatalf("the SSE stream ended with %v after event %d, want it cut short", err, s.last.Load())
		}
	case <-time.After(time.Minute):
		t.Fatal("the SSE stream still flows a minute after the rollout; its replica's drain_timeout is 2s")
	}
	// The WebSocket's next frame is the proxy's close frame; the client
	// sent nothing since, so no echo comes before it.
	op, p, err := ws.read()
	if err != nil || op != 8 || len(p) < 2 || binary.BigEndian.Uint16(p) != 1001 {
		t.Fatalf("the WebSocket after the drain: frame %d %q %v, want close 1001", op, p, err)
	}
	if _, _, err := ws.read(); err != io.EOF {
		t.Fatalf("after the close frame: %v, want the end of the connection", err)
	}
	d.waitApp("hello", "revision 1's replica to leave service", func(a types.App) bool { return len(pids(a, 1, "ready")) == 0 })
}
