package selfscale

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"strings"
	"time"

	"github.com/shoal-run/shoal/internal/api/types"
	"github.com/shoal-run/shoal/internal/bench/kit"
)

// asReplica is a self API caller that is replica id as far as the daemon
// can tell: its token and URL from its environment, its connections made
// inside its network namespace.
type asReplica struct {
	id, url, token string
	pid            int
	client         *http.Client
}

// replicaCaller reads replica r's self API environment from /proc.
func replicaCaller(r types.Replica) (*asReplica, error) {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/environ", r.Pid))
	if err != nil {
		return nil, fmt.Errorf("replica %s: %w", r.ID, err)
	}
	x := &asReplica{id: r.ID, pid: r.Pid}
	for _, kv := range strings.Split(string(b), "\x00") {
		if v, ok := strings.CutPrefix(kv, "SHOAL_API_URL="); ok {
			x.url = v
		}
		if v, ok := strings.CutPrefix(kv, "SHOAL_TOKEN="); ok {
			x.token = v
		}
	}
	if x.url == "" || x.token == "" {
		return nil, fmt.Errorf("replica %s: no SHOAL_API_URL or SHOAL_TOKEN in its environment", r.ID)
	}
	host := strings.TrimPrefix(x.url, "http://")
	x.client = &http.Client{Timeout: time.Minute, Transport: &http.Transport{Proxy: nil, MaxIdleConnsPerHost: 4,
		DialContext: func(ctx context.Context, _, _ string) (net.Conn, error) {
			return kit.Dialer{NSPath: fmt.Sprintf("/proc/%d/ns/net", x.pid)}.Dial(ctx, host)
		}}}
	return x, nil
}

// connect opens a kept-alive connection ahead of a timed call, so the time
// measured is the call's, not the namespace switch's.
func (x *asReplica) connect(ctx context.Context) error {
	_, err := x.call(ctx, "GET", "/v1/self", "", nil)
	return err
}

// call makes a self API call and decodes a 2xx answer into v.
func (x *asReplica) call(ctx context.Context, method, path, body string, v any) (int, error) {
	var rd io.Reader
	if body != "" {
		rd = bytes.NewReader([]byte(body))
	}
	req, err := http.NewRequestWithContext(ctx, method, x.url+path, rd)
	if err != nil {
		return 0, err
	}
	req.Header.Set("Authorization", "Bearer "+x.token)
	resp, err := x.client.Do(req)
	if err != nil {
		return 0, fmt.Errorf("%s %s as %s: %w", method, path, x.id, err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	if resp.StatusCode/100 != 2 {
		return resp.StatusCode, fmt.Errorf("%s %s as %s: %s: %s", method, path, x.id, resp.Status, bytes.TrimSpace(b))
	}
	if v != nil {
		if err := json.Unmarshal(b, v); err != nil {
			return resp.StatusCode, fmt.Errorf("%s %s: %w", method, path, err)
		}
	}
	return resp.StatusCode, nil
}

func (x *asReplica) close() { x.client.CloseIdleConnections() }

// callPaced is call that waits and tries again, up to ten times, while the
// app's self API rate limit refuses (as an app should). It returns how
// long the last, answered attempt took.
func (x *asReplica) callPaced(ctx context.Context, method, path, body string, v any) (time.Duration, int, error) {
	for i := 0; ; i++ {
		t0 := time.Now()
		code, err := x.call(ctx, method, path, body, v)
		d := time.Since(t0)
		if code != http.StatusConflict || !strings.Contains(fmt.Sprint(err), `"reason":"rate"`) || i == 9 {
			return d, code, err
		}
		select {
		case <-ctx.Done():
			return d, code, ctx.Err()
		case <-time.After(time.Second):
		}
	}
}
