package localnode

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"strings"
	"sync"
	"time"

	"github.com/shoal-run/shoal/internal/manifest"
	"github.com/shoal-run/shoal/internal/runtime"
)

// runCheck runs the health command in replica id's container, bounded by
// the check's timeout; exit code 0 is healthy. The command goes through the
// OCI runtime's exec, so it runs as the replica's own process would: same
// namespaces, cgroup (its memory and pids count against the replica's
// limits), user, capabilities, no_new_privs, seccomp filter and rlimits.
func (n *Node) runCheck(parent context.Context, h manifest.Health, id string) error {
	timeout := h.Timeout.Duration
	if timeout <= 0 {
		timeout = time.Second
	}
	ctx, cancel := context.WithTimeout(parent, timeout)
	defer cancel()
	out := &tailWriter{max: 256}
	st, err := n.rt.Exec(ctx, id, runtime.ExecSpec{Args: h.Command, Stdout: out, Stderr: out})
	switch {
	case err != nil && errors.Is(ctx.Err(), context.DeadlineExceeded) && parent.Err() == nil:
		return fmt.Errorf("command %q did not finish in %s", h.Command[0], timeout)
	case err != nil:
		return fmt.Errorf("command %q: %w", h.Command[0], err)
	case st.Code != 0:
		msg := fmt.Sprintf("command %q exited with code %d", h.Command[0], st.Code)
		if o := out.String(); o != "" {
			msg += ": " + o
		}
		return errors.New(msg)
	}
	return nil
}

// probeClient returns the HTTP client of replica id's checks. Each replica
// has its own transport, which keeps one idle connection between its checks:
// a busy replica is not asked to accept a new connection each interval. A
// freeze, stop or removal of the replica drops its idle connection only
// (dropProbe), so a frozen or gone replica holds no socket of the daemon's,
// nor does a later replica at its address get a dead one, and the other
// replicas keep theirs.
func (n *Node) probeClient(id string) *http.Client {
	n.mu.Lock()
	defer n.mu.Unlock()
	t := n.probes[id]
	if t == nil {
		t = &http.Transport{Proxy: nil, MaxIdleConnsPerHost: 1, IdleConnTimeout: time.Minute}
		if n.probes == nil {
			n.probes = map[string]*http.Transport{}
		}
		n.probes[id] = t
	}
	return &http.Client{Transport: t, CheckRedirect: noRedirect}
}

// dropProbe closes the idle check connection of replica id and forgets its
// transport (a later check makes a new one).
func (n *Node) dropProbe(id string) {
	n.mu.Lock()
	t := n.probes[id]
	delete(n.probes, id)
	n.mu.Unlock()
	if t != nil {
		t.CloseIdleConnections()
	}
}

// noRedirect makes a check answer a redirect as is.
func noRedirect(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }

// tailWriter keeps the last max bytes written to it.
type tailWriter struct {
	mu  sync.Mutex
	max int
	b   []byte
}

func (w *tailWriter) Write(p []byte) (int, error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.b = append(w.b, p...)
	if over := len(w.b) - w.max; over > 0 {
		w.b = w.b[over:]
	}
	return len(p), nil
}

// String is the output kept, on one line.
func (w *tailWriter) String() string {
	w.mu.Lock()
	defer w.mu.Unlock()
	return strings.Join(strings.Fields(strings.ToValidUTF8(string(w.b), "?")), " ")
}

// HealthAgent is the User-Agent of HTTP health checks, followed by "/" and
// the daemon's version: an operator can leave them out of access logs.
const HealthAgent = "shoal-health"

// probe checks once whether the replica at addr is healthy with an HTTP,
// gRPC (grpccheck.go) or TCP check; an HTTP check goes through c and says it
// is one with the User-Agent ua.
func probe(ctx context.Context, c *http.Client, h manifest.Health, addr, ua string) error {
	timeout := h.Timeout.Duration
	if timeout <= 0 {
		timeout = time.Second
	}
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	if h.GRPC {
		return grpcProbe(ctx, h, addr, ua)
	}
	if h.HTTP == "" {
		var d net.Dialer
		c, err := d.DialContext(ctx, "tcp", addr)
		if err != nil {
			return err
		}
		return c.Close()
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, "http://"+addr+h.HTTP, nil)
	if err != nil {
		return err
	}
	req.Header.Set("User-Agent", ua)
	resp, err := c.Do(req)
	if err != nil {
		return err
	}
	// Read to the end (a bounded check body), so the connection is kept.
	io.Copy(io.Discard, io.LimitReader(resp.Body, 64<<10))
	resp.Body.Close()
	if resp.StatusCode >= 400 {
		return fmt.Errorf("GET %s: %s", h.HTTP, resp.Status)
	}
	return nil
}
