package cli

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"os"
	"strings"

	"github.com/shoal-run/shoal/internal/api/types"
)

// DefaultHost is where the CLI looks for the daemon when neither --host nor
// SHOAL_HOST says otherwise.
const DefaultHost = "unix:///run/shoal/shoal.sock"

// Client talks to the daemon's API.
type Client struct {
	host  string
	base  string
	token string
	hc    *http.Client
}

// APIError is a failed API request.
type APIError struct {
	Status int
	Msg    string
	Field  string
}

// Error names the field in front of the message unless the message names
// it already ("shoal.toml: domains: unknown field").
func (e *APIError) Error() string {
	if e.Field != "" && !strings.HasPrefix(e.Msg, e.Field+":") && !strings.Contains(e.Msg, " "+e.Field+":") {
		return e.Field + ": " + e.Msg
	}
	return e.Msg
}

// NewClient returns a client for host: "unix:///path.sock", "tcp://h:p" or
// "http://h:p". An empty host means $SHOAL_HOST, then DefaultHost.
func NewClient(host, token string) (*Client, error) {
	if host == "" {
		host = os.Getenv("SHOAL_HOST")
	}
	if host == "" {
		host = DefaultHost
	}
	if token == "" {
		token = os.Getenv("SHOAL_TOKEN")
	}
	u, err := url.Parse(host)
	if err != nil {
		return nil, usageErrorf("--host %q: %v", host, err)
	}
	tr := &http.Transport{DisableCompression: true}
	c := &Client{host: host, token: token, hc: &http.Client{Transport: tr}}
	switch u.Scheme {
	case "unix":
		path := u.Path
		if path == "" {
			path = u.Opaque
		}
		tr.DialContext = func(ctx context.Context, _, _ string) (net.Conn, error) {
			var d net.Dialer
			return d.DialContext(ctx, "unix", path)
		}
		c.base = "http://shoal"
	case "tcp", "http":
		c.base = "http://" + u.Host
	default:
		return nil, usageErrorf("--host %q: use unix:///path.sock, tcp://host:port or http://host:port", host)
	}
	return c, nil
}

// Do sends a request with an optional JSON body and decodes a JSON answer
// into out (if not nil).
func (c *Client) Do(ctx context.Context, method, path string, body, out any) error {
	resp, err := c.send(ctx, method, path, body)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	if out == nil || resp.StatusCode == http.StatusNoContent {
		io.Copy(io.Discard, resp.Body)
		return nil
	}
	if err := json.NewDecoder(resp.Body).Decode(out); err != nil {
		return fmt.Errorf("%s %s: decode answer: %w", method, path, err)
	}
	return nil
}

// send performs the request and turns a non-2xx answer into an *APIError.
func (c *Client) send(ctx context.Context, method, path string, body any) (*http.Response, error) {
	rd, raw := body.(io.Reader) // a stream sent as it is (a tar)
	if body != nil && !raw {
		b, err := json.Marshal(body)
		if err != nil {
			return nil, err
		}
		rd = bytes.NewReader(b)
	}
	req, err := http.NewRequestWithContext(ctx, method, c.base+path, rd)
	if err != nil {
		return nil, err
	}
	if body != nil && !raw {
		req.Header.Set("Content-Type", "application/json")
	}
	if c.token != "" {
		req.Header.Set("Authorization", "Bearer "+c.token)
	}
	resp, err := c.hc.Do(req)
	if err != nil {
		if errors.Is(err, context.Canceled) {
			return nil, err
		}
		return nil, fmt.Errorf("cannot reach the shoal daemon at %s: %w (is it running? start it with `shoal daemon` or `make run`)", c.host, unwrapURL(err))
	}
	if resp.StatusCode >= 300 {
		defer resp.Body.Close()
		var e types.Error
		b, _ := io.ReadAll(io.LimitReader(resp.Body, 1<<20))
		if json.Unmarshal(b, &e) != nil || e.Error == "" {
			e.Error = fmt.Sprintf("%s %s: %s: %s", method, path, resp.Status, strings.TrimSpace(string(b)))
		}
		return nil, &APIError{Status: resp.StatusCode, Msg: e.Error, Field: e.Field}
	}
	return resp, nil
}

func unwrapURL(err error) error {
	var ue *url.Error
	if errors.As(err, &ue) {
		return ue.Err
	}
	return err
}
