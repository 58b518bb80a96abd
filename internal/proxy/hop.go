package proxy

import (
	"context"
	"crypto/hmac"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"net/http"
	"strings"
	"time"

	"github.com/shoal-run/shoal/internal/route"
)

// Hops: in a cluster an endpoint of another node (route.Endpoint.Node is
// not this proxy's node) is reached through that node's proxy, whose
// address the route gives as the endpoint's. The request then carries the
// header HopHeader, "<endpoint ID> <MAC>", the MAC an HMAC-SHA256 of the
// ID under the cluster's hop key. The proxy that receives it checks the
// MAC (403 when it fails), and sends the request to exactly that endpoint,
// which must be one of its own: it never forwards a hop again and never
// tries another endpoint. A request with the header answers 403 on a
// proxy that has no hop key.

// HopHeader names the endpoint a request hops to.
const HopHeader = "Shoal-Hop"

// hopWait bounds how long a hop waits for its endpoint to appear in the
// receiving proxy's table (the route reaches the nodes one by one).
const hopWait = 2 * time.Second

// hopConf is the proxy's place in a cluster.
type hopConf struct {
	node string // this proxy's node
	key  []byte
}

// SetHop makes the proxy the one of node in a cluster whose proxies share
// key: endpoints of other nodes are reached through hops, and hops to its
// own are served. Routes set before keep their endpoints until set again.
func (p *Proxy) SetHop(node string, key []byte) {
	p.hop.Store(&hopConf{node: node, key: append([]byte(nil), key...)})
}

// mac is the MAC of a hop to endpoint id, in hex.
func (c *hopConf) mac(id string) string {
	m := hmac.New(sha256.New, c.key)
	m.Write([]byte("shoal-hop\x00"))
	m.Write([]byte(id))
	return hex.EncodeToString(m.Sum(nil))
}

// value is the hop header to reach endpoint e of a route through its
// node's proxy; "" when e is this node's own (or the proxy is not in a
// cluster).
func (c *hopConf) value(e route.Endpoint) string {
	if c == nil || e.Node == "" || e.Node == c.node {
		return ""
	}
	return e.ID + " " + c.mac(e.ID)
}

// verify returns the endpoint ID a hop header names, if its MAC is right.
func (c *hopConf) verify(vals []string) (string, bool) {
	if c == nil || len(vals) != 1 {
		return "", false
	}
	id, mac, ok := strings.Cut(vals[0], " ")
	if !ok || id == "" {
		return "", false
	}
	return id, hmac.Equal([]byte(mac), []byte(c.mac(id)))
}

// serveHop serves a request another node's proxy sent to one of this
// node's endpoints.
func (p *Proxy) serveHop(w http.ResponseWriter, r *http.Request, vals []string) {
	id, ok := p.hop.Load().verify(vals)
	if !ok {
		p.log.Warn("proxy: a request with a hop header that fails authentication refused", "remote", r.RemoteAddr, "host", r.Host)
		(&refusal{err: errors.New("hop header refused"), code: http.StatusForbidden, field: HopHeader}).write(w)
		return
	}
	delete(r.Header, HopHeader)
	a, e := p.hopTarget(r.Context(), p.appName(r.Host), id)
	if e == nil {
		f := &refusal{code: http.StatusServiceUnavailable, retry: true,
			err: fmt.Errorf("endpoint %q of host %q is not routed on this node", id, r.Host)}
		f.write(w)
		return
	}
	// Counted on the endpoint (WaitIdle waits for it) but not in its
	// load: the node the request came from reports it.
	e.inFlight.Add(1)
	e.hopIn.Add(1)
	x := &stdReq{p: p, w: w, r: r}
	st := &x.st
	st.Context, st.app, st.ep, st.hop, st.start = r.Context(), a, e, true, p.clock.Now()
	defer func() {
		e.hopIn.Add(-1)
		e.release(p.clock.Now())
	}()
	if direct(r) {
		safe, idempotent := methodKind(r.Method)
		p.forward(st, x, safe, idempotent, r.ContentLength)
		return
	}
	ctx, end := context.WithCancel(st.Context)
	defer end()
	st.Context = ctx
	defer e.hold(end)()
	p.rp.ServeHTTP(w, r.WithContext(st))
}

// hopTarget returns app name and its endpoint id, which must be one of
// this node's, waiting up to hopWait for them to be routed here; nil when
// they are not.
func (p *Proxy) hopTarget(ctx context.Context, name, id string) (*app, *endpoint) {
	t := p.clock.NewTimer(hopWait)
	defer t.Stop()
	// An app not here yet is looked for again each hopLook.
	look := p.clock.NewTimer(hopLook)
	defer look.Stop()
	for {
		a := (*p.apps.Load())[name]
		var changed <-chan struct{}
		if a != nil {
			changed = a.waitChan()
			p.mu.Lock()
			e := a.eps[id]
			p.mu.Unlock()
			if e != nil && e.hop == "" {
				return a, e
			}
		}
		select {
		case <-changed:
		case <-look.C():
			look.Reset(hopLook)
		case <-t.C():
			return nil, nil
		case <-ctx.Done():
			return nil, nil
		}
	}
}

// hopLook is how often a hop to an app not yet routed here looks again.
const hopLook = 10 * time.Millisecond

// hopped returns the request head and inline body of x as sent to e: with
// e's hop header when e is another node's.
func (x *fastReq) hopped(e *endpoint) []byte {
	if e.hop == "" {
		return x.out
	}
	h := x.head - 2 // before the empty line
	b := append(x.hopBuf[:0], x.out[:h]...)
	b = append(b, HopHeader+": "...)
	b = append(b, e.hop...)
	b = append(b, "\r\n"...)
	x.hopBuf = append(b, x.out[h:]...)
	return x.hopBuf
}
