package dataplane

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
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

	"github.com/shoal-run/shoal/internal/clock"
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

// A route change that did not reach the proxy is sent again after
// retryFirst, then after twice as long each time up to retryMax, each
// attempt given twice the time of the one before up to retryCallMax: a
// proxy slowed down by load takes it in the end, and a change sent twice
// is applied once (route versions).
const (
	retryFirst   = 50 * time.Millisecond
	retryMax     = 2 * time.Second
	retryCallMax = time.Minute
	// syncAbove: with more changes than this to send again, the whole
	// table goes in one call.
	syncAbove = 32
	// sendsAtOnce bounds the route calls on the wire (the proxy applies
	// them one at a time anyway).
	sendsAtOnce = 8
)

// Client is the daemon's side of the control socket: it changes the proxy
// process's routes and reads its load. It remembers every route it set, so
// that Sync can push the whole table to an adopted or restarted proxy.
// Nothing here is on a request's path.
//
// Every route change gets a version (a counter that starts at the clock's
// Unix nanoseconds, so that it rises across restarts of the daemon); the
// proxy applies a change only when it is newer than what it holds for the
// app (see control.stale). A change that does not reach the proxy is sent
// again in the background with back-off until it does, or until a newer
// one replaced it.
type Client struct {
	hc      *http.Client
	log     *slog.Logger
	clock   clock.Clock
	timeout time.Duration // a route call's first (callTimeout)

	// mu guards the table and the versions; no call is made while it is
	// held. aux orders the calls that carry no version (hop,
	// certificates, challenges), each sent with what is set when it is
	// held, so the last sent is the newest; a whole table's call is not
	// made under it. syncMu orders the whole pushes.
	mu      sync.Mutex
	aux     sync.Mutex
	syncMu  sync.Mutex
	routes  map[string]route.Route // by app, lower case
	ver     uint64                 // of the last change
	pending map[string]uint64      // apps whose change at that version is not known to have reached the proxy
	synced  uint64                 // version of the last whole table the proxy took
	retry   bool                   // the retry loop runs
	kick    chan struct{}
	slots   chan struct{}     // sendsAtOnce
	certs   []route.Cert      // as last set; nil: never set
	hop     *Hop              // nil: not in a cluster
	chall   []proxy.Challenge // the ACME challenges answered
	broken  atomic.Bool       // the whole table must be pushed again
	warned  bool              // the failure was logged
	// ctx bounds the route calls; Close cancels it and ends the retry
	// loop.
	ctx    context.Context
	cancel context.CancelFunc
	closed bool

	loadMu     sync.Mutex
	load       map[string]route.Load // every app's, read at loadAt
	loadAt     time.Time
	fullAt     time.Time // when the last read of every app's began
	refreshing bool
	loadErr    error
	// loadWithin bounds the next background read: doubled after one that
	// did not finish in time (up to retryCallMax), so that a proxy slowed
	// down by load is read in the end; back to timeout after a read.
	loadWithin time.Duration
}

// NewClient returns a client of the control socket at path.
func NewClient(path string, log *slog.Logger) *Client {
	return newClient(unixClient(path, 0), log, clock.Real{})
}

func newClient(hc *http.Client, log *slog.Logger, clk clock.Clock) *Client {
	if log == nil {
		log = slog.Default()
	}
	ctx, cancel := context.WithCancel(context.Background())
	return &Client{hc: hc, log: log, clock: clk, timeout: callTimeout, routes: map[string]route.Route{},
		pending: map[string]uint64{}, ver: uint64(clk.Now().UnixNano()), kick: make(chan struct{}, 1), slots: make(chan struct{}, sendsAtOnce),
		ctx: ctx, cancel: cancel}
}

// Close stops sending route changes again: the retry loop ends and its
// route calls under way are given up on. Calls made after it fail.
func (c *Client) Close() {
	c.mu.Lock()
	c.closed = true
	c.mu.Unlock()
	c.cancel()
}

func (c *Client) do(ctx context.Context, method, path string, body any, out any) error {
	_, err := c.doHeader(ctx, method, path, body, out)
	return err
}

// doHeader is do that returns the answer's header.
func (c *Client) doHeader(ctx context.Context, method, path string, body any, out any) (http.Header, error) {
	var rd io.Reader
	if body != nil {
		b, err := json.Marshal(body)
		if err != nil {
			return nil, err
		}
		rd = bytes.NewReader(b)
	}
	req, err := http.NewRequestWithContext(ctx, method, "http://proxy"+path, rd)
	if err != nil {
		return nil, err
	}
	if body != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	resp, err := c.hc.Do(req)
	if err != nil {
		return nil, fmt.Errorf("proxy control %s %s: %w", method, path, err)
	}
	defer resp.Body.Close()
	if resp.StatusCode >= 300 {
		b, _ := io.ReadAll(io.LimitReader(resp.Body, 4096))
		return nil, fmt.Errorf("proxy control %s %s: %s: %s", method, path, resp.Status, strings.TrimSpace(string(b)))
	}
	if out != nil {
		if err := json.NewDecoder(resp.Body).Decode(out); err != nil {
			return nil, fmt.Errorf("proxy control %s %s: %w", method, path, err)
		}
	} else {
		io.Copy(io.Discard, resp.Body)
	}
	return resp.Header, nil
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
// sends nothing new to endpoints the route left out, unless the proxy
// could not be reached: the change is then sent again in the background
// until it arrives.
func (c *Client) SetRoute(r route.Route) {
	app := strings.ToLower(r.App)
	c.mu.Lock()
	c.ver++
	v := c.ver
	c.routes[app] = r
	c.pending[app] = v
	c.mu.Unlock()
	c.deliver(app, v, &r, c.timeout)
}

// RemoveRoute removes an app from the proxy (sent again in the
// background, as SetRoute's, until it arrives).
func (c *Client) RemoveRoute(app string) {
	app = strings.ToLower(app)
	c.mu.Lock()
	c.ver++
	v := c.ver
	delete(c.routes, app)
	c.pending[app] = v
	c.mu.Unlock()
	c.deliver(app, v, nil, c.timeout)
}

// deliver sends app's change at version v (r nil: the removal) and
// records the answer; a failure starts the retry loop. It reports whether
// the change reached the proxy.
func (c *Client) deliver(app string, v uint64, r *route.Route, timeout time.Duration) bool {
	c.slots <- struct{}{} // its time runs once it has its turn
	defer func() { <-c.slots }()
	ctx, cancel := context.WithTimeout(c.ctx, timeout)
	defer cancel()
	path := "/v1/routes/" + url.PathEscape(app) + "?version=" + strconv.FormatUint(v, 10)
	// The whole table known taken when the call goes: one taken while it
	// is under way may be newer than the answer.
	c.mu.Lock()
	synced := c.synced
	c.mu.Unlock()
	var a answer
	var err error
	if r != nil {
		a, err = c.send(ctx, http.MethodPut, path, r)
	} else {
		a, err = c.send(ctx, http.MethodDelete, path, nil)
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if err != nil {
		c.failLocked(err)
		return false
	}
	if c.pending[app] == v {
		delete(c.pending, app)
		if a.versioned && !a.applied {
			// The latest change of the app was refused as stale: the
			// proxy holds versions of an earlier daemon's. The whole
			// table goes again, numbered above them.
			c.ver = max(c.ver, a.version)
			c.brokenLocked("the proxy holds newer route versions than this daemon's")
		}
	}
	if a.versioned && a.table < synced {
		// The proxy took a whole table at synced before the call and
		// now holds an older one: a new process that lost it.
		c.brokenLocked("the proxy lost its route table")
	}
	return true
}

// failLocked notes a change that did not reach the proxy and starts the
// retry loop. c.mu is held.
func (c *Client) failLocked(err error) {
	if !c.warned {
		c.log.Error("proxy: a route change did not reach the proxy process; it is sent again until it does", "err", err)
		c.warned = true
	}
	c.retryLocked()
}

// brokenLocked asks for the whole table to be pushed again. c.mu is held.
func (c *Client) brokenLocked(why string) {
	if !c.broken.Swap(true) {
		c.log.Warn("proxy: the route table is pushed again", "why", why)
	}
	c.retryLocked()
}

// retryLocked starts the retry loop, or wakes it (not once closed). c.mu
// is held.
func (c *Client) retryLocked() {
	if c.closed {
		return
	}
	if c.retry {
		select {
		case c.kick <- struct{}{}:
		default:
		}
		return
	}
	c.retry = true
	go c.retryLoop()
}

// retryLoop sends again what did not reach the proxy, with back-off,
// until everything has or the client is closed.
func (c *Client) retryLoop() {
	wait, timeout := retryFirst, c.timeout
	for {
		t := c.clock.NewTimer(wait)
		select {
		case <-t.C():
		case <-c.ctx.Done():
			t.Stop()
			c.mu.Lock()
			c.retry = false
			c.mu.Unlock()
			return
		}
		select { // a kick while waiting is served by this round
		case <-c.kick:
		default:
		}
		err := c.resend(timeout)
		c.mu.Lock()
		if c.closed || err == nil && len(c.pending) == 0 && !c.broken.Load() {
			c.retry = false
			if c.warned && !c.closed {
				c.log.Info("proxy: route changes reached the proxy process")
				c.warned = false
			}
			c.mu.Unlock()
			return
		}
		c.mu.Unlock()
		if err == nil {
			wait, timeout = retryFirst, c.timeout
			continue
		}
		wait, timeout = min(2*wait, retryMax), min(2*timeout, retryCallMax)
	}
}

// resend sends the pending changes, or the whole table when it is broken
// or many changes wait, each call within timeout.
func (c *Client) resend(timeout time.Duration) error {
	c.mu.Lock()
	type change struct {
		app string
		v   uint64
		r   *route.Route
	}
	var todo []change
	for app, v := range c.pending {
		ch := change{app: app, v: v}
		if r, ok := c.routes[app]; ok {
			ch.r = &r
		}
		todo = append(todo, ch)
	}
	whole := c.broken.Load() || len(todo) > syncAbove
	c.mu.Unlock()
	if whole {
		return c.sync(timeout)
	}
	for _, ch := range todo {
		if !c.deliver(ch.app, ch.v, ch.r, timeout) {
			return fmt.Errorf("route change of %s: not delivered", ch.app)
		}
	}
	return nil
}

// SetHop makes the proxy the one of node in a cluster whose proxies
// authenticate hops with key; it is set again at every Sync. Call it
// before the routes that name nodes.
func (c *Client) SetHop(node string, key []byte) error {
	c.aux.Lock()
	defer c.aux.Unlock()
	c.mu.Lock()
	c.hop = &Hop{Node: node, Key: key}
	hop := c.hop
	c.mu.Unlock()
	return c.call(http.MethodPut, "/v1/hop", hop, nil)
}

// SetChallenges replaces the ACME challenges the proxy answers (HTTP-01
// on any host, TLS-ALPN-01 on its TLS listener); Sync sends them again.
func (c *Client) SetChallenges(ctx context.Context, list []proxy.Challenge) error {
	c.aux.Lock()
	defer c.aux.Unlock()
	c.mu.Lock()
	c.chall = slices.Clone(list)
	if c.chall == nil {
		c.chall = []proxy.Challenge{}
	}
	chall := c.chall
	c.mu.Unlock()
	return c.do(ctx, http.MethodPut, "/v1/challenges", chall, nil)
}

// SetCerts replaces the certificates the proxy serves over TLS with
// certs, the whole set: kept here and pushed again at every Sync (they
// live only in the proxy's memory), and with the whole table when this
// call does not reach the proxy.
func (c *Client) SetCerts(certs []route.Cert) {
	c.aux.Lock()
	defer c.aux.Unlock()
	c.mu.Lock()
	c.certs = slices.Clone(certs)
	if c.certs == nil {
		c.certs = []route.Cert{}
	}
	cs := c.certs
	c.mu.Unlock()
	if err := c.call(http.MethodPut, "/v1/certs", cs, nil); err != nil {
		c.mu.Lock()
		c.brokenLocked(err.Error())
		c.mu.Unlock()
	}
}

// Sync replaces the proxy's whole table with the routes (and the
// certificates and ACME challenges, once set) set through this client:
// apps it has no route for are removed, challenges it holds that this
// client did not set are dropped. A failure is retried in the background.
func (c *Client) Sync() error {
	err := c.sync(c.timeout)
	if err != nil {
		c.mu.Lock()
		c.retryLocked()
		c.mu.Unlock()
	}
	return err
}

func (c *Client) sync(timeout time.Duration) error {
	c.syncMu.Lock()
	defer c.syncMu.Unlock()
	err := c.syncOnce(timeout)
	var stale errStale
	if errors.As(err, &stale) {
		// The proxy holds a newer whole table (an earlier daemon's
		// versions): once more, numbered above it.
		c.mu.Lock()
		c.ver = max(c.ver, stale.version)
		c.mu.Unlock()
		err = c.syncOnce(timeout)
	}
	if err != nil {
		c.broken.Store(true)
	}
	return err
}

// errStale is a whole table the proxy refused as older than its own.
type errStale struct{ version uint64 }

func (e errStale) Error() string {
	return fmt.Sprintf("proxy control: the whole table is older than the proxy's (version %d)", e.version)
}

// syncOnce pushes hop, certificates, the whole table and the challenges;
// c.aux is held for the hop and certificates, and the challenges, not
// for the table (a minute at most to a loaded proxy), so that an ACME
// challenge set meanwhile is not held back. c.syncMu is held.
func (c *Client) syncOnce(timeout time.Duration) error {
	ctx, cancel := context.WithTimeout(c.ctx, timeout)
	defer cancel()
	c.aux.Lock()
	c.mu.Lock()
	hop, certs := c.hop, c.certs
	c.mu.Unlock()
	err := func() error {
		defer c.aux.Unlock()
		if hop != nil {
			if err := c.do(ctx, http.MethodPut, "/v1/hop", hop, nil); err != nil {
				return err
			}
		}
		if certs != nil {
			if err := c.do(ctx, http.MethodPut, "/v1/certs", certs, nil); err != nil {
				return err
			}
		}
		return nil
	}()
	if err != nil {
		return err
	}
	c.mu.Lock()
	c.ver++
	v := c.ver
	routes := slices.Collect(maps.Values(c.routes))
	c.mu.Unlock()
	a, err := c.send(ctx, http.MethodPut, "/v1/routes?version="+strconv.FormatUint(v, 10), routes)
	if err != nil {
		return err
	}
	if a.versioned && !a.applied {
		return errStale{a.version}
	}
	c.aux.Lock()
	c.mu.Lock()
	chall := c.chall
	c.mu.Unlock()
	if chall != nil { // the empty set too: a proxy adopted may hold some
		err = c.do(ctx, http.MethodPut, "/v1/challenges", chall, nil)
	}
	c.aux.Unlock()
	if err != nil {
		return err
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	c.synced = max(c.synced, v)
	maps.DeleteFunc(c.pending, func(_ string, pv uint64) bool { return pv <= v })
	c.broken.Store(false)
	return nil
}

// answer is the proxy's answer to a route call.
type answer struct {
	versioned bool   // the proxy numbers route changes
	version   uint64 // the highest it applied
	table     uint64 // that of the last whole table it took
	applied   bool
}

// send makes a route call and reads the proxy's answer.
func (c *Client) send(ctx context.Context, method, path string, body any) (answer, error) {
	var a answer
	h, err := c.doHeader(ctx, method, path, body, nil)
	if err != nil {
		return a, err
	}
	if s := h.Get(headerVersion); s != "" {
		var terr error
		a.version, err = strconv.ParseUint(s, 10, 64)
		a.table, terr = strconv.ParseUint(h.Get(headerTable), 10, 64)
		a.versioned, a.applied = err == nil && terr == nil, h.Get(headerApplied) != "0"
	}
	return a, nil
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
	last := c.load[app]
	c.loadMu.Unlock()
	var st route.Load
	err := c.call(http.MethodGet, "/v1/load/"+url.PathEscape(app), nil, &st)
	c.loadFailed(err)
	if err != nil {
		return last // the last known, not none
	}
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
	within := max(c.loadWithin, c.timeout)
	go func() {
		var all map[string]route.Load
		ctx, cancel := context.WithTimeout(context.Background(), within)
		err := c.do(ctx, http.MethodGet, path, nil, &all)
		cancel()
		c.loadFailed(err)
		c.loadMu.Lock()
		defer c.loadMu.Unlock()
		c.refreshing = false
		if err != nil {
			c.loadWithin = min(2*within, retryCallMax)
			return
		}
		c.loadWithin = c.timeout
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
