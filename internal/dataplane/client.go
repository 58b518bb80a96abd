package dataplane

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"maps"
	"net/http"
	"net/url"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"

	"github.com/shoal-run/shoal/internal/proxy"
	"github.com/shoal-run/shoal/internal/route"
)

// loadMaxAge is how old the load of every app, read in one call, may be
// before it is read again. Controllers ask every 100 ms per active app; one
// call serves them all.
const loadMaxAge = 40 * time.Millisecond

// loadBatchAfter: a snapshot of every app's load older than this is not
// used; the app asked for is read alone.
const loadBatchAfter = time.Second

// loadFullEvery: between reads of every app's load this far apart, the
// snapshot is refreshed with the apps whose load moved since the last
// read (less loadOverlap, for requests under way across it), so that a
// refresh costs the apps with traffic, not every app.
const (
	loadFullEvery = 10 * time.Second
	loadOverlap   = time.Second
)

// callTimeout bounds a control call other than wait-idle.
const callTimeout = 5 * time.Second

// Client is the daemon's side of the control socket: it changes the proxy
// process's routes and reads its load. It remembers every route it set, so
// that Sync can push the whole table to an adopted or restarted proxy.
// Nothing here is on a request's path.
type Client struct {
	hc  *http.Client
	log *slog.Logger

	// mu orders route changes: a change is sent while it is held, so the
	// proxy applies them in the order serving made them.
	mu     sync.Mutex
	routes map[string]route.Route // by app, lower case
	certs  []route.Cert           // as last set; nil: never set
	hop    *Hop                   // nil: not in a cluster
	chall  []proxy.Challenge      // the ACME challenges answered
	broken atomic.Bool            // a change failed to reach the proxy

	loadMu     sync.Mutex
	load       map[string]route.Load // every app's, read at loadAt
	loadAt     time.Time
	fullAt     time.Time // when the last read of every app's began
	refreshing bool
	loadErr    error
}

// NewClient returns a client of the control socket at path.
func NewClient(path string, log *slog.Logger) *Client {
	if log == nil {
		log = slog.Default()
	}
	return &Client{hc: unixClient(path, 0), log: log, routes: map[string]route.Route{}}
}

func (c *Client) do(ctx context.Context, method, path string, body any, out any) error {
	var rd io.Reader
	if body != nil {
		b, err := json.Marshal(body)
		if err != nil {
			return err
		}
		rd = bytes.NewReader(b)
	}
	req, err := http.NewRequestWithContext(ctx, method, "http://proxy"+path, rd)
	if err != nil {
		return err
	}
	if body != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	resp, err := c.hc.Do(req)
	if err != nil {
		return fmt.Errorf("proxy control %s %s: %w", method, path, err)
	}
	defer resp.Body.Close()
	if resp.StatusCode >= 300 {
		b, _ := io.ReadAll(io.LimitReader(resp.Body, 4096))
		return fmt.Errorf("proxy control %s %s: %s: %s", method, path, resp.Status, strings.TrimSpace(string(b)))
	}
	if out != nil {
		if err := json.NewDecoder(resp.Body).Decode(out); err != nil {
			return fmt.Errorf("proxy control %s %s: %w", method, path, err)
		}
	} else {
		io.Copy(io.Discard, resp.Body)
	}
	return nil
}

func (c *Client) call(method, path string, body, out any) error {
	ctx, cancel := context.WithTimeout(context.Background(), callTimeout)
	defer cancel()
	return c.do(ctx, method, path, body, out)
}

// Info asks the proxy process who it is.
func (c *Client) Info(ctx context.Context) (Info, error) {
	var in Info
	err := c.do(ctx, http.MethodGet, "/v1/info", nil, &in)
	return in, err
}

// SetRoute sets one app's route in the proxy. Once it returns the proxy
// sends nothing new to endpoints the route left out. A proxy that cannot
// be reached gets the whole table at the next Sync.
func (c *Client) SetRoute(r route.Route) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.routes[strings.ToLower(r.App)] = r
	if err := c.call(http.MethodPut, "/v1/routes/"+url.PathEscape(r.App), r, nil); err != nil {
		c.fail(err)
	}
}

// SetHop makes the proxy the one of node in a cluster whose proxies
// authenticate hops with key; it is set again at every Sync. Call it
// before the routes that name nodes.
func (c *Client) SetHop(node string, key []byte) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.hop = &Hop{Node: node, Key: key}
	return c.call(http.MethodPut, "/v1/hop", c.hop, nil)
}

// SetChallenges replaces the ACME challenges the proxy answers (HTTP-01
// on any host, TLS-ALPN-01 on its TLS listener); Sync sends them again.
func (c *Client) SetChallenges(ctx context.Context, list []proxy.Challenge) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.chall = slices.Clone(list)
	if c.chall == nil {
		c.chall = []proxy.Challenge{}
	}
	return c.do(ctx, http.MethodPut, "/v1/challenges", c.chall, nil)
}

// SetCerts replaces the certificates the proxy serves over TLS with
// certs, the whole set: sent in order with the route changes, kept here
// and pushed again at every Sync (they live only in the proxy's memory).
func (c *Client) SetCerts(certs []route.Cert) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.certs = slices.Clone(certs)
	if c.certs == nil {
		c.certs = []route.Cert{}
	}
	if err := c.call(http.MethodPut, "/v1/certs", c.certs, nil); err != nil {
		c.fail(err)
	}
}

// RemoveRoute removes an app from the proxy.
func (c *Client) RemoveRoute(app string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	delete(c.routes, strings.ToLower(app))
	if err := c.call(http.MethodDelete, "/v1/routes/"+url.PathEscape(app), nil, nil); err != nil {
		c.fail(err)
	}
}

func (c *Client) fail(err error) {
	if !c.broken.Swap(true) {
		c.log.Error("proxy: a route change did not reach the proxy process; the table is pushed again when it is back", "err", err)
	}
}

// Sync replaces the proxy's whole table with the routes (and the
// certificates and ACME challenges, once set) set through this client:
// apps it has no route for are removed, challenges it holds that this
// client did not set are dropped.
func (c *Client) Sync() error {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.hop != nil {
		if err := c.call(http.MethodPut, "/v1/hop", c.hop, nil); err != nil {
			c.broken.Store(true)
			return err
		}
	}
	if c.certs != nil {
		if err := c.call(http.MethodPut, "/v1/certs", c.certs, nil); err != nil {
			c.broken.Store(true)
			return err
		}
	}
	routes := slices.Collect(maps.Values(c.routes))
	if err := c.call(http.MethodPut, "/v1/routes", routes, nil); err != nil {
		c.broken.Store(true)
		return err
	}
	if c.chall != nil { // the empty set too: a proxy adopted may hold some
		if err := c.call(http.MethodPut, "/v1/challenges", c.chall, nil); err != nil {
			c.broken.Store(true)
			return err
		}
	}
	c.broken.Store(false)
	return nil
}

// Loads returns every app's counters, read at once (nil when the proxy
// cannot be reached).
func (c *Client) Loads() map[string]route.Load {
	var all map[string]route.Load
	c.loadFailed(c.call(http.MethodGet, "/v1/load", nil, &all))
	return all
}

// Routes returns the proxy's table as last pushed.
func (c *Client) Routes(ctx context.Context) ([]route.Route, error) {
	var out []route.Route
	err := c.do(ctx, http.MethodGet, "/v1/routes", nil, &out)
	return out, err
}

// Load returns an app's counters. While controllers ask often (a snapshot
// of every app's, read in one call, is less than loadBatchAfter old) they
// come from that snapshot, and one older than loadMaxAge is read again in
// the background: no caller waits for the whole table. After a quiet spell
// (the wake-up of a cold app, say) this app's are read alone, at once. An
// unreachable proxy reports no load.
func (c *Client) Load(app string) route.Load {
	app = strings.ToLower(app)
	c.loadMu.Lock()
	age := time.Since(c.loadAt)
	if c.load != nil && age < loadBatchAfter {
		st := c.load[app]
		if age >= loadMaxAge {
			c.refreshLocked()
		}
		c.loadMu.Unlock()
		return st
	}
	c.refreshLocked()
	c.loadMu.Unlock()
	var st route.Load
	c.loadFailed(c.call(http.MethodGet, "/v1/load/"+url.PathEscape(app), nil, &st))
	return st
}

// refreshLocked reads every app's counters in the background unless a
// read is under way. c.loadMu is held.
func (c *Client) refreshLocked() {
	if c.refreshing {
		return
	}
	c.refreshing = true
	began := time.Now()
	full := c.load == nil || began.Sub(c.fullAt) >= loadFullEvery
	path := "/v1/load"
	if !full {
		path += "?since=" + strconv.FormatInt(c.loadAt.Add(-loadOverlap).UnixNano(), 10)
	}
	go func() {
		var all map[string]route.Load
		err := c.call(http.MethodGet, path, nil, &all)
		c.loadFailed(err)
		c.loadMu.Lock()
		defer c.loadMu.Unlock()
		c.refreshing = false
		if err != nil {
			return
		}
		if full {
			c.load, c.fullAt = all, began
		} else {
			// The apps left out had no request since: theirs stand.
			for app, l := range all {
				c.load[app] = l
			}
		}
		c.loadAt = began
	}()
}

func (c *Client) loadFailed(err error) {
	c.loadMu.Lock()
	defer c.loadMu.Unlock()
	if err != nil && c.loadErr == nil {
		c.log.Warn("proxy: load not read", "err", err)
	}
	c.loadErr = err
}

// WaitIdle returns once the endpoint has no request in flight in the
// proxy, or with ctx's error; ctx's end is the end of the drain's grace,
// and the proxy then cuts the requests still on the endpoint (see
// proxy.Cut). A proxy that cannot be reached holds no request.
func (c *Client) WaitIdle(ctx context.Context, id string) error {
	err := c.do(ctx, http.MethodPost, "/v1/endpoints/"+url.PathEscape(id)+"/wait-idle", nil, nil)
	if err != nil && ctx.Err() != nil {
		// The drain's grace is over: the proxy cuts what is still on the
		// endpoint. (The proxy cuts nothing when a caller just goes away.)
		cctx, cancel := context.WithTimeout(context.Background(), callTimeout)
		defer cancel()
		if cerr := c.do(cctx, http.MethodPost, "/v1/endpoints/"+url.PathEscape(id)+"/cut", nil, nil); cerr != nil {
			c.log.Warn("proxy: the requests left on a drained endpoint were not cut", "endpoint", id, "err", cerr)
		}
		return ctx.Err()
	}
	return nil
}

// Cut asks the proxy to end the requests in flight on an endpoint that no
// route has (proxy.Cut); a proxy that cannot be reached is logged.
func (c *Client) Cut(id string) {
	ctx, cancel := context.WithTimeout(context.Background(), callTimeout)
	defer cancel()
	if err := c.do(ctx, http.MethodPost, "/v1/endpoints/"+url.PathEscape(id)+"/cut", nil, nil); err != nil {
		c.log.Warn("proxy: the requests on an endpoint were not cut", "endpoint", id, "err", err)
	}
}

// Shutdown asks the proxy process to drain for up to grace and exit.
func (c *Client) Shutdown(ctx context.Context, grace time.Duration) error {
	return c.do(ctx, http.MethodPost, "/v1/shutdown?grace="+grace.String(), nil, nil)
}

// Gather reads the proxy's metrics for the daemon's /metrics. A proxy
// that cannot be reached adds none.
func (c *Client) Gather() ([]*dto.MetricFamily, error) {
	ctx, cancel := context.WithTimeout(context.Background(), callTimeout)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, "http://proxy/metrics", nil)
	if err != nil {
		return nil, err
	}
	req.Header.Set("Accept", string(expfmt.NewFormat(expfmt.TypeTextPlain)))
	resp, err := c.hc.Do(req)
	if err != nil {
		return nil, nil
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return nil, nil
	}
	p := expfmt.NewTextParser(model.UTF8Validation)
	fams, err := p.TextToMetricFamilies(resp.Body)
	if err != nil {
		return nil, fmt.Errorf("proxy metrics: %w", err)
	}
	out := make([]*dto.MetricFamily, 0, len(fams))
	for _, f := range fams {
		out = append(out, f)
	}
	return out, nil
}
