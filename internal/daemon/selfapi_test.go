package daemon

import (
	"io"
	"net"
	"testing"
	"time"
)

// An address holds at most max connections to the self API; closing one
// makes room for the next.
func TestPerAddrListener(t *testing.T) {
	inner, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	l := &perAddrListener{Listener: inner, max: 2, open: map[string]int{}}
	defer l.Close()
	accepted := make(chan net.Conn, 8)
	go func() {
		for {
			c, err := l.Accept()
			if err != nil {
				return
			}
			accepted <- c
		}
	}()
	dial := func() net.Conn {
		c, err := net.Dial("tcp", inner.Addr().String())
		if err != nil {
			t.Fatal(err)
		}
		return c
	}
	a, b := dial(), dial()
	ca, cb := <-accepted, <-accepted
	third := dial()
	third.SetReadDeadline(time.Now().Add(5 * time.Second))
	if _, err := third.Read(make([]byte, 1)); err != io.EOF {
		t.Fatalf("a third connection from one address: read %v, want EOF (closed)", err)
	}
	select {
	case <-accepted:
		t.Fatal("a third connection was handed to the server")
	default:
	}
	ca.Close()
	a.Close()
	fourth := dial()
	select {
	case c := <-accepted:
		c.Close()
	case <-time.After(5 * time.Second):
		t.Fatal("no room after a connection closed")
	}
	for _, c := range []net.Conn{b, cb, third, fourth} {
		c.Close()
	}
}
