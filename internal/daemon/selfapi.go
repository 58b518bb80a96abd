package daemon

import (
	"context"
	"fmt"
	"net"
	"strconv"
	"syscall"

	"golang.org/x/sys/unix"
)

// listenSelf opens the self API's listener on the bridge gateway, the one
// address every replica reaches and nothing outside the host does. The
// bridge may not exist yet (it is made with the first bridge namespace),
// so the socket is bound with IP_FREEBIND. It returns nil when the self
// API is off.
func (d *Daemon) listenSelf() (net.Listener, error) {
	port := d.cfg.SelfAPIPort
	if port < 0 {
		return nil, nil
	}
	addr := net.JoinHostPort(d.net.Gateway().String(), strconv.Itoa(port))
	lc := net.ListenConfig{Control: func(_, _ string, c syscall.RawConn) error {
		var serr error
		err := c.Control(func(fd uintptr) {
			serr = unix.SetsockoptInt(int(fd), unix.IPPROTO_IP, unix.IP_FREEBIND, 1)
		})
		if err != nil {
			return err
		}
		return serr
	}}
	l, err := lc.Listen(context.Background(), "tcp4", addr)
	if err != nil {
		return nil, fmt.Errorf("--self-api-port %d: listen on the bridge gateway %s: %w", port, addr, err)
	}
	return l, nil
}
