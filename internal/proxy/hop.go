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
func (c *hopConf) verify(hop string) (string, bool) {
	if c == nil {
		return "", false
	}
	id, mac, ok := strings.Cut(hop, " ")
	if !ok || id == "" {
		return "", false
	}
	return id, hmac.Equal([]byte(mac), []byte(c.mac(id)))
}

// admitHop admits a request that another node's proxy sent to one of this
// node's endpoints: its hop header (hop) must authenticate, and the
// endpoint it names be routed here (it is waited for a while). st.ep is
// then that endpoint, with the request counted on it but not in its load,
// which the sending node reports; st.hop keeps the request on it.
func (p *Proxy) admitHop(st *reqState, name, hop, remote string) *refusal {
	id, ok := p.hop.Load().verify(hop)
	if !ok {
		p.log.Warn("proxy: a request whose hop header fails authentication refused", "remote", remote, "app", name)
		return &refusal{code: http.StatusForbidden, err: errors.New("hop header refused"), field: HopHeader, close: true}
	}
	a, e := p.hopTarget(st.Context, name, id)
	if e == nil {
		if st.Context.Err() != nil {
			return &refusal{code: statusClientGone}
		}
		return &refusal{code: http.StatusServiceUnavailable, retry: true,
			err: fmt.Errorf("endpoint %q of app %q is not routed on this node", id, name)}
	}
	e.inFlight.Add(1)
	e.hopIn.Add(1)
	st.app, st.ep, st.hop, st.start = a, e, true, p.clock.Now()
	return nil
}

// finishHop ends a request admitHop admitted.
func (p *Proxy) finishHop(st *reqState) {
	e := st.ep
	e.hopIn.Add(-1)
	e.release(p.clock.Now())
	st.app, st.ep = nil, nil
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

// hopped returns the request head and inline body of x as sent to e,
// another node's endpoint: with e's hop header.
func (x *fastReq) hopped(e *endpoint) []byte {
	h := x.head - 2 // before the empty line
	b := append(x.hopBuf[:0], x.out[:h]...)
	b = append(b, HopHeader+": "...)
	b = append(b, e.hop...)
	b = append(b, "\r\n"...)
	x.hopBuf = append(b, x.out[h:]...)
	return x.hopBuf
}
