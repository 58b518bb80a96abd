package agent

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"sync"
	"time"

	"github.com/shoal-run/shoal/internal/cluster"
	"github.com/shoal-run/shoal/internal/errdefs"
	"github.com/shoal-run/shoal/internal/store"
)

// Prefix is where the agent's routes are on a node's TCP API.
const Prefix = "/v1/agent/"

// NodeHeader names the node a request is meant for: a node that is
// another (an address now reaching a different node) answers 421 and does
// nothing.
const NodeHeader = "Shoal-Node"

// Client calls other nodes of the cluster by name. It finds a node's
// address in its record (the node's --advertise) and keeps it until a call
// to it fails to connect or is refused.
type Client struct {
	Store  store.Store
	Secret string
	// HTTP makes the requests; nil: a client without an overall timeout
	// (calls end with their context, and a Wait is a long poll) that
	// connects within 5 seconds, keeps connections alive with TCP probes
	// every 15 seconds, and never goes through a proxy.
	HTTP *http.Client
	// Live, if set, ends a call once its node leaves the live set.
	Live LiveSet

	watch liveWatch
	once  sync.Once
	mu    sync.Mutex
	addrs map[string]string
}

// NewClient returns a client of the cluster whose records are in st,
// sending secret.
func NewClient(st store.Store, secret string) *Client {
	return &Client{Store: st, Secret: secret}
}

func (c *Client) init() {
	c.once.Do(func() {
		c.addrs = map[string]string{}
		if c.HTTP == nil {
			tr := http.DefaultTransport.(*http.Transport).Clone()
			tr.Proxy = nil // node to node, never through a proxy of the environment
			tr.DialContext = (&net.Dialer{Timeout: 5 * time.Second, KeepAlive: 15 * time.Second}).DialContext
			tr.MaxIdleConnsPerHost = 16
			c.HTTP = &http.Client{Transport: tr}
		}
	})
}

// Addr returns the host:port node advertises.
func (c *Client) Addr(ctx context.Context, node string) (string, error) {
	c.init()
	c.mu.Lock()
	a, ok := c.addrs[node]
	c.mu.Unlock()
	if ok {
		return a, nil
	}
	kv, err := c.Store.Get(ctx, store.NodeKey(node))
	if err != nil {
		return "", fmt.Errorf("node %q: %w", node, err)
	}
	var rec cluster.Record
	if err := json.Unmarshal(kv.Value, &rec); err != nil {
		return "", fmt.Errorf("node %q: bad record: %w", node, err)
	}
	if rec.Addr == "" {
		return "", fmt.Errorf("node %q advertises no address (start it with --advertise host:port): %w", node, errdefs.ErrUnavailable)
	}
	c.mu.Lock()
	c.addrs[node] = rec.Addr
	c.mu.Unlock()
	return rec.Addr, nil
}

func (c *Client) forget(node string) {
	c.mu.Lock()
	delete(c.addrs, node)
	c.mu.Unlock()
}

// Send makes a request to node's path (under its API, e.g. Prefix+"ping")
// with the cluster secret and returns the answer, whatever its status. A
// node that cannot be reached, or that leaves the live set before the
// answer is read, is errdefs.ErrUnavailable.
func (c *Client) Send(ctx context.Context, node string, req *http.Request) (*http.Response, error) {
	addr, err := c.Addr(ctx, node)
	if err != nil {
		return nil, err
	}
	lctx, release := c.whileLive(ctx, node)
	req = req.WithContext(lctx)
	req.URL.Scheme, req.URL.Host, req.Host = "http", addr, addr
	req.Header.Set("Authorization", "Bearer "+c.Secret)
	req.Header.Set(NodeHeader, node)
	resp, err := c.HTTP.Do(req)
	if err != nil {
		// The cause is read before release, which ends lctx itself: a
		// call that failed on its own (the node's connection closed) would
		// otherwise read as the release's bare "context canceled".
		left := lctx.Err() != nil
		cause := context.Cause(lctx)
		release()
		c.forget(node)
		if ctx.Err() != nil {
			return nil, fmt.Errorf("node %s: %w", node, ctx.Err())
		}
		if left && cause != nil {
			return nil, cause
		}
		return nil, fmt.Errorf("node %s at %s: %v: %w", node, addr, err, errdefs.ErrUnavailable)
	}
	resp.Body = &releaseBody{ReadCloser: resp.Body, release: release}
	if resp.StatusCode == http.StatusUnauthorized || resp.StatusCode == http.StatusMisdirectedRequest {
		c.forget(node)
	}
	return resp, nil
}

// call sends in as JSON (nil: no body) to node's agent route path and
// decodes the answer into out (nil: discarded). A failed answer comes back
// as an error of the peer's errdefs kind.
func (c *Client) call(ctx context.Context, node, method, path string, in, out any) error {
	var body io.Reader
	if in != nil {
		b, err := json.Marshal(in)
		if err != nil {
			return fmt.Errorf("node %s: %s: %w", node, path, err)
		}
		body = bytes.NewReader(b)
	}
	req, err := http.NewRequest(method, "http://node"+Prefix+path, body)
	if err != nil {
		return fmt.Errorf("node %s: %s: %w", node, path, err)
	}
	if in != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	resp, err := c.Send(ctx, node, req)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	if resp.StatusCode/100 != 2 {
		return readErr(node, resp)
	}
	if out == nil {
		io.Copy(io.Discard, resp.Body)
		return nil
	}
	if err := json.NewDecoder(resp.Body).Decode(out); err != nil {
		return fmt.Errorf("node %s: %s: bad answer: %w", node, path, err)
	}
	return nil
}

// Pong is a node's answer to a ping.
type Pong struct {
	Node string    `json:"node"`
	Time time.Time `json:"time"`
}

// Ping asks node who it is; an address that reaches another node is an
// error.
func (c *Client) Ping(ctx context.Context, node string) (Pong, error) {
	var p Pong
	if err := c.call(ctx, node, http.MethodGet, "ping", nil, &p); err != nil {
		return p, err
	}
	if p.Node != node {
		c.forget(node)
		return p, fmt.Errorf("node %s: its address reaches node %q", node, p.Node)
	}
	return p, nil
}
