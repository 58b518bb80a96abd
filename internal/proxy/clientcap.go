package proxy

import (
	"errors"
	"net"
	"sync"
	"syscall"
)

// One client address may hold at most Limits.MaxConnsPerClient connections
// to the proxy (a connection over it is closed as soon as it is accepted),
// so that one client cannot take the proxy's descriptors from the others.
// Should the process run out of descriptors all the same (EMFILE, ENFILE),
// the accept loop closes idle connections of the client that holds the
// most, and backs off, rather than spinning or waiting for them to time
// out.

// clientAddr is the address a connection counts against: its peer's IP.
func clientAddr(c net.Conn) string {
	a := c.RemoteAddr().String()
	if h, _, err := net.SplitHostPort(a); err == nil {
		return h
	}
	return a
}

// admitConn counts a new connection from client against the cap; false
// when the client is at it. Called with f.mu held.
func (f *server) admitConnLocked(client string) bool {
	if f.perClient == nil {
		f.perClient = map[string]int{}
	}
	if f.perClient[client] >= f.limits.MaxConnsPerClient {
		return false
	}
	f.perClient[client]++
	return true
}

// connGone uncounts a connection of client once it is closed.
func (f *server) connGone(client string) {
	f.mu.Lock()
	if n := f.perClient[client] - 1; n > 0 {
		f.perClient[client] = n
	} else {
		delete(f.perClient, client)
	}
	f.mu.Unlock()
}

// outOfFiles tells whether an accept failed for want of descriptors.
func outOfFiles(err error) bool {
	return errors.Is(err, syscall.EMFILE) || errors.Is(err, syscall.ENFILE)
}

// shed closes idle connections of the client with the most: half of them,
// at least one. It returns how many it closed.
func (f *server) shed() int {
	f.mu.Lock()
	defer f.mu.Unlock()
	top, most := "", 0
	for client, n := range f.perClient {
		if n > most {
			top, most = client, n
		}
	}
	want := max(most/2, 1)
	closed := 0
	for c := range f.conns {
		if closed == want {
			break
		}
		if c.client == top && c.state.CompareAndSwap(stateIdle, stateClosed) {
			c.c.Close()
			closed++
		}
	}
	return closed
}

// countedConn is a handed-off connection: it is uncounted when net/http
// (or the handler that hijacked it) closes it.
type countedConn struct {
	once sync.Once
	gone func()
}

func (c *countedConn) closed() {
	if c != nil {
		c.once.Do(c.gone)
	}
}
