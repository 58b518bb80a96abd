package proxy

import (
	"bufio"
	"context"
	"encoding/binary"
	"fmt"
	"io"
	"net"
	"net/http"
	"testing"

	"golang.org/x/net/websocket"

	"github.com/shoal-run/shoal/internal/route"
)

// frame is one WebSocket frame as a client reads it.
type frame struct {
	op      byte
	payload []byte
}

// readFrame reads one unmasked frame (server to client).
func readFrame(br *bufio.Reader) (frame, error) {
	var h [2]byte
	if _, err := io.ReadFull(br, h[:]); err != nil {
		return frame{}, err
	}
	n := uint64(h[1] & 0x7f)
	switch n {
	case 126:
		var b [2]byte
		if _, err := io.ReadFull(br, b[:]); err != nil {
			return frame{}, err
		}
		n = uint64(binary.BigEndian.Uint16(b[:]))
	case 127:
		var b [8]byte
		if _, err := io.ReadFull(br, b[:]); err != nil {
			return frame{}, err
		}
		n = binary.BigEndian.Uint64(b[:])
	}
	p := make([]byte, n)
	if _, err := io.ReadFull(br, p); err != nil {
		return frame{}, err
	}
	return frame{op: h[0] & 0x0f, payload: p}, nil
}

// writeText writes a masked text frame (client to server).
func writeText(w io.Writer, msg string) error {
	mask := [4]byte{1, 2, 3, 4}
	b := []byte{0x81, 0x80 | byte(len(msg))}
	b = append(b, mask[:]...)
	for i := range len(msg) {
		b = append(b, msg[i]^mask[i%4])
	}
	_, err := w.Write(b)
	return err
}

// dialWebSocket opens a WebSocket to /ws of app a through the proxy at addr.
func dialWebSocket(t *testing.T, addr string) (net.Conn, *bufio.Reader) {
	t.Helper()
	conn, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close() })
	fmt.Fprint(conn, "GET /ws HTTP/1.1\r\nHost: a.localhost\r\nConnection: Upgrade\r\nUpgrade: websocket\r\n"+
		"Origin: http://a.localhost/\r\nSec-WebSocket-Version: 13\r\nSec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\n\r\n")
	br := bufio.NewReader(conn)
	resp, err := http.ReadResponse(br, nil)
	if err != nil || resp.StatusCode != http.StatusSwitchingProtocols {
		t.Fatalf("WebSocket handshake through the proxy: %v %v", resp, err)
	}
	return conn, br
}

// A WebSocket still open when its endpoint's drain is over gets a close
// frame from the proxy, status 1001 (going away), and then the end of its
// connection; until then it echoes as before.
func TestDrainGraceClosesWebSocketGoingAway(t *testing.T) {
	b := newBackend(t, websocket.Handler(func(ws *websocket.Conn) {
		var msg string
		for websocket.Message.Receive(ws, &msg) == nil {
			if websocket.Message.Send(ws, "echo "+msg) != nil {
				return
			}
		}
	}).ServeHTTP)
	f := newFront(t, Options{})
	f.p.SetRoute(routeTo("a", b))
	conn, br := dialWebSocket(t, f.addr)
	echo := func(msg string) {
		t.Helper()
		if err := writeText(conn, msg); err != nil {
			t.Fatal(err)
		}
		if fr, err := readFrame(br); err != nil || fr.op != 1 || string(fr.payload) != "echo "+msg {
			t.Fatalf("echo of %q: %+v %v", msg, fr, err)
		}
	}
	echo("one")
	f.p.SetRoute(route.Route{App: "a"})
	ctx, graceOver := context.WithCancel(context.Background())
	waited := make(chan error, 1)
	go func() { waited <- f.p.WaitIdle(ctx, "a-a") }()
	echo("during the drain")
	graceOver()
	if err := recv(t, waited, "WaitIdle"); err == nil {
		t.Fatal("WaitIdle cut short returned no error")
	}
	fr, err := readFrame(br)
	if err != nil {
		t.Fatalf("after the cut the client read %v, want a close frame first", err)
	}
	if fr.op != 8 || len(fr.payload) < 2 || binary.BigEndian.Uint16(fr.payload) != 1001 {
		t.Fatalf("after the cut the client read frame %d %q, want close 1001", fr.op, fr.payload)
	}
	if _, err := readFrame(br); err != io.EOF {
		t.Fatalf("after the close frame the client read %v, want the end of the connection", err)
	}
	eventually(t, "nothing in flight", func() bool { return f.p.Load("a").InFlight == 0 })
}

// The close frame goes out between two frames only: a WebSocket cut while
// the replica is in the middle of a frame ends without one (a close frame
// there would be read as the frame's payload); one cut between frames,
// after frames with 16-bit and 64-bit lengths, ends with it.
func TestWebSocketCloseFrameOnlyBetweenFrames(t *testing.T) {
	long := func(n int, ext int) []byte {
		h := []byte{0x82}
		switch ext {
		case 2:
			h = append(h, 126, byte(n>>8), byte(n))
		case 8:
			h = append(h, 127)
			h = binary.BigEndian.AppendUint64(h, uint64(n))
		}
		return append(h, make([]byte, n)...)
	}
	for _, c := range []struct {
		name  string
		sent  []byte
		frame bool
	}{
		{"between frames", append(append(long(300, 2), long(70000, 8)...), 0x81, 2, 'h', 'i'), true},
		{"inside a head", []byte{0x81}, false},
		{"inside a payload", long(300, 2)[:100], false},
	} {
		t.Run(c.name, func(t *testing.T) {
			replica, proxySide := net.Pipe()
			ws := newWSConn(proxySide) // the replica's side as the proxy reads it
			go func() {
				replica.Write(c.sent)
			}()
			got := 0
			buf := make([]byte, 32<<10)
			for got < len(c.sent) {
				n, err := ws.Read(buf)
				if err != nil {
					t.Fatal(err)
				}
				got += n
			}
			ws.goAway()
			n, err := ws.Read(buf)
			if c.frame {
				if err != nil || string(buf[:n]) != string(goingAway) {
					t.Fatalf("after the cut: %q %v, want the close frame", buf[:n], err)
				}
				if _, err := ws.Read(buf); err != io.EOF {
					t.Fatalf("after the close frame: %v, want EOF", err)
				}
				return
			}
			if err == nil {
				t.Fatalf("after a cut inside a frame: %q, want an error and no close frame", buf[:n])
			}
		})
	}
}
