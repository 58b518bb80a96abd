package daemon

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"strconv"
	"sync"
	"syscall"
	"time"

	"golang.org/x/sys/unix"

	"github.com/shoal-run/shoal/internal/appapi"
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

// Limits of the self API's listener: replicas are not trusted, so none
// may hold more than a few connections, or keep one idle for long.
const (
	selfConnsPerAddr = 16
	selfIdleTimeout  = time.Minute
	// A replicate call waits for a cold start (start_timeout, 60 s by
	// default, at most appapi.MaxReplicateWait) before it answers.
	selfWriteTimeout = appapi.MaxReplicateWait + 10*time.Second
)

// serveSelf serves the self API on l.
func (d *Daemon) serveSelf(l net.Listener, h http.Handler) {
	s := &http.Server{Handler: h, ReadHeaderTimeout: 5 * time.Second, ReadTimeout: 10 * time.Second,
		WriteTimeout: selfWriteTimeout, IdleTimeout: selfIdleTimeout, MaxHeaderBytes: 16 << 10}
	d.servers = append(d.servers, s)
	go func() {
		if err := s.Serve(&perAddrListener{Listener: l, max: selfConnsPerAddr, open: map[string]int{}}); err != nil && !errors.Is(err, http.ErrServerClosed) {
			d.log.Error("self API stopped", "addr", l.Addr().String(), "err", err)
		}
	}()
}

// selfRelay serves the self API with h on one host and while this node
// leads a cluster; while it follows, it relays each call to the leader,
// whose controllers know the replicas' tokens.
func (d *Daemon) selfRelay(h http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if f := d.selfFwd.Load(); f != nil && f.ForwardSelf(w, r) {
			return
		}
		h.ServeHTTP(w, r)
	})
}

// perAddrListener closes connections from an address that already has max
// open ones.
type perAddrListener struct {
	net.Listener
	max  int
	mu   sync.Mutex
	open map[string]int
}

func (l *perAddrListener) Accept() (net.Conn, error) {
	for {
		c, err := l.Listener.Accept()
		if err != nil {
			return nil, err
		}
		host, _, _ := net.SplitHostPort(c.RemoteAddr().String())
		l.mu.Lock()
		if l.open[host] >= l.max {
			l.mu.Unlock()
			c.Close()
			continue
		}
		l.open[host]++
		l.mu.Unlock()
		return &countedConn{Conn: c, l: l, host: host}, nil
	}
}

type countedConn struct {
	net.Conn
	l    *perAddrListener
	host string
	once sync.Once
}

func (c *countedConn) Close() error {
	c.once.Do(func() {
		c.l.mu.Lock()
		if c.l.open[c.host]--; c.l.open[c.host] <= 0 {
			delete(c.l.open, c.host)
		}
		c.l.mu.Unlock()
	})
	return c.Conn.Close()
}
