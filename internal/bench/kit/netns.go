package kit

import (
	"bufio"
	"context"
	"fmt"
	"net"
	goruntime "runtime"
	"strings"
	"time"

	"golang.org/x/sys/unix"
)

// Dialer opens TCP connections, from the host or from inside a network
// namespace.
type Dialer struct {
	NSPath string // "" for the host's own namespace
}

// Dial connects to addr. Inside a namespace it creates the socket on a
// thread that has joined the namespace and is then thrown away, so the rest
// of the process stays in the host's namespace.
func (d Dialer) Dial(ctx context.Context, addr string) (net.Conn, error) {
	if d.NSPath == "" {
		return (&net.Dialer{}).DialContext(ctx, "tcp", addr)
	}
	type result struct {
		c   net.Conn
		err error
	}
	ch := make(chan result, 1)
	go func() {
		goruntime.LockOSThread() // never unlocked: the thread ends with this goroutine
		fd, err := unix.Open(d.NSPath, unix.O_RDONLY|unix.O_CLOEXEC, 0)
		if err != nil {
			ch <- result{err: fmt.Errorf("open %s: %w", d.NSPath, err)}
			return
		}
		err = unix.Setns(fd, unix.CLONE_NEWNET)
		unix.Close(fd)
		if err != nil {
			ch <- result{err: fmt.Errorf("setns %s: %w", d.NSPath, err)}
			return
		}
		c, err := (&net.Dialer{}).DialContext(ctx, "tcp", addr)
		ch <- result{c, err}
	}()
	r := <-ch
	return r.c, r.err
}

// WaitHTTP polls GET path on addr every millisecond until it answers 200,
// and returns how long that took from start. exited, if not nil, reports
// that the server died.
func WaitHTTP(ctx context.Context, d Dialer, addr, path string, start time.Time, limit time.Duration, exited func() error) (time.Duration, error) {
	deadline := start.Add(limit)
	var last error
	for time.Now().Before(deadline) {
		if exited != nil {
			if err := exited(); err != nil {
				return 0, err
			}
		}
		if ok, err := getOnce(ctx, d, addr, path); ok {
			return time.Since(start), nil
		} else {
			last = err
		}
		if ctx.Err() != nil {
			return 0, ctx.Err()
		}
		time.Sleep(time.Millisecond)
	}
	return 0, fmt.Errorf("no HTTP 200 from %s%s within %s: %v", addr, path, limit, last)
}

func getOnce(ctx context.Context, d Dialer, addr, path string) (bool, error) {
	cctx, cancel := context.WithTimeout(ctx, time.Second)
	defer cancel()
	c, err := d.Dial(cctx, addr)
	if err != nil {
		return false, err
	}
	defer c.Close()
	c.SetDeadline(time.Now().Add(time.Second))
	if _, err := fmt.Fprintf(c, "GET %s HTTP/1.0\r\nHost: bench\r\n\r\n", path); err != nil {
		return false, err
	}
	line, err := bufio.NewReader(c).ReadString('\n')
	if err != nil {
		return false, err
	}
	if f := strings.Fields(line); len(f) >= 2 && f[1] == "200" {
		return true, nil
	}
	return false, fmt.Errorf("answer %q", strings.TrimSpace(line))
}

// FreePort returns a TCP port on 127.0.0.1 that was free a moment ago.
func FreePort() (int, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return 0, err
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port, nil
}

// WaitTCP waits until addr, dialled through d, accepts a connection.
func WaitTCP(ctx context.Context, d Dialer, addr string) error {
	deadline := time.Now().Add(15 * time.Second)
	for {
		c, err := d.Dial(ctx, addr)
		if err == nil {
			c.Close()
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("server at %s not up after 15s: %w", addr, err)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// ExitedChan turns a process's wait channel into an "exited?" check.
func ExitedChan(done chan error) func() error {
	return func() error {
		select {
		case err := <-done:
			done <- err
			return fmt.Errorf("server exited: %v", err)
		default:
			return nil
		}
	}
}
