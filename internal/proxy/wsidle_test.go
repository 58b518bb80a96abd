package proxy

import (
	"encoding/binary"
	"io"
	"testing"
	"time"

	"golang.org/x/net/websocket"

	"github.com/shoal-run/shoal/internal/route"
)

// A WebSocket through which nothing passes for the app's websocket
// timeout (5 minutes by default) gets a close frame, status 1001, and its
// connections end: its replica has nothing in flight and may freeze.
func TestWebSocketIdleTimeout(t *testing.T) {
	for _, tc := range []struct {
		name    string
		timeout time.Duration
		wait    time.Duration
	}{
		{"default", 0, route.DefaultWebSocketTimeout},
		{"per app", time.Minute, time.Minute},
	} {
		t.Run(tc.name, func(t *testing.T) {
			b := newBackend(t, websocket.Handler(func(ws *websocket.Conn) {
				var msg string
				for websocket.Message.Receive(ws, &msg) == nil {
					if websocket.Message.Send(ws, "echo "+msg) != nil {
						return
					}
				}
			}).ServeHTTP)
			f, fc := fakeFront(t, Options{})
			r := routeTo("a", b)
			r.WebSocketTimeout = tc.timeout
			f.p.SetRoute(r)
			conn, br := dialWebSocket(t, f.addr)
			conn.SetDeadline(time.Now().Add(10 * time.Second)) // a hang guard
			if err := writeText(conn, "hi"); err != nil {
				t.Fatal(err)
			}
			if fr, err := readFrame(br); err != nil || string(fr.payload) != "echo hi" {
				t.Fatalf("echo: %+v %v", fr, err)
			}
			fc.Advance(tc.wait)
			fr, err := readFrame(br)
			if err != nil {
				t.Fatalf("an idle WebSocket read %v, want a close frame", err)
			}
			if fr.op != 8 || len(fr.payload) < 2 || binary.BigEndian.Uint16(fr.payload) != 1001 || string(fr.payload[2:]) != "idle timeout" {
				t.Fatalf("an idle WebSocket read frame %d %q, want close 1001", fr.op, fr.payload)
			}
			if _, err := readFrame(br); err != io.EOF {
				t.Fatalf("after the close frame: %v, want the end of the connection", err)
			}
			eventually(t, "nothing in flight", func() bool { return f.p.Load("a").InFlight == 0 })
		})
	}
}
