package proxy

import (
	"context"
	"crypto/hmac"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"net/http"
	"strconv"
	"strings"
	"time"

	"github.com/shoal-run/shoal/internal/route"
)

// Hops: in a cluster an endpoint of another node (route.Endpoint.Node is
// not this proxy's node) is reached through that node's proxy, whose
// address the route gives as the endpoint's. The request then carries the
// header HopHeader, "<endpoint ID> <unix seconds> <MAC>", the MAC an
// HMAC-SHA256 under the cluster's hop key of the ID, the time, the
// receiving node's name and the request's Host. The proxy that receives it
// checks the MAC against its own node and the Host it got, and the time
// against its clock within hopWindow (403 when either fails), and sends
// the request to exactly that endpoint, which must be one of its own: it
// never forwards a hop again and never tries another endpoint. A request
// with the header answers 403 on a proxy that has no hop key.

// HopHeader names the endpoint a request hops to.
const HopHeader = "Shoal-Hop"

// hopWindow is how far the time in a hop header may be from the receiving
// proxy's clock, either way. The nodes' clocks are assumed kept in step
// (NTP); a captured header can be replayed only this long, to the same
// node and Host.
const hopWindow = 30 // seconds

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

// mac is the MAC, in hex, of a hop to endpoint id at time ts (unix
// seconds, in decimal) received by node for a request to host.
func (c *hopConf) mac(id, ts, node, host string) string {
	b := make([]byte, 0, 128)
	for _, f := range [...]string{"shoal-hop", id, ts, node, host} {
		b = append(append(b, f...), 0)
	}
	m := hmac.New(sha256.New, c.key)
	m.Write(b)
	return hex.EncodeToString(m.Sum(nil))
}

// header is the hop header that reaches endpoint id through node's proxy
// for a request to host at unix time now.
func (c *hopConf) header(id, node, host string, now int64) string {
	ts := strconv.FormatInt(now, 10)
	return id + " " + ts + " " + c.mac(id, ts, node, host)
}

// far is the node whose proxy reaches e, an endpoint of a route: "" when
// e is this node's own (or the proxy is not in a cluster).
func (c *hopConf) far(e route.Endpoint) string {
	if c == nil || e.Node == c.node {
		return ""
	}
	return e.Node
}

// hopStamp is the last hop header made for an endpoint: made again when
// the second or the Host changes.
type hopStamp struct {
	ts   int64
	host string
	val  string
}

// hopValue is the hop header of a request to host sent to e, another
// node's endpoint (e.node is not ""); "" when the proxy is not in a
// cluster.
func (p *Proxy) hopValue(e *endpoint, host string) string {
	now := p.clock.Now().Unix()
	if s := e.stamp.Load(); s != nil && s.ts == now && s.host == host {
		return s.val
	}
	return p.stampHop(e, host, now)
}

// stampHop makes and keeps e's hop header for host at unix time now.
func (p *Proxy) stampHop(e *endpoint, host string, now int64) string {
	c := p.hop.Load()
	if c == nil {
		return ""
	}
	s := &hopStamp{ts: now, host: host, val: c.header(e.id, e.node, host, now)}
	e.stamp.Store(s)
	return s.val
}

// verify returns the endpoint ID a hop header names, if the header was
// made for this node and host, within hopWindow of now, and its MAC is
// right.
func (c *hopConf) verify(hop, host string, now int64) (string, bool) {
	if c == nil {
		return "", false
	}
	id, rest, ok := strings.Cut(hop, " ")
	ts, mac, ok2 := strings.Cut(rest, " ")
	if !ok || !ok2 || id == "" {
		return "", false
	}
	t, err := strconv.ParseInt(ts, 10, 64)
	if err != nil || t < now-hopWindow || t > now+hopWindow {
		return "", false
	}
	return id, hmac.Equal([]byte(mac), []byte(c.mac(id, ts, c.node, host)))
}

// admitHop admits a request to host that another node's proxy sent to one
// of this node's endpoints: its hop header (hop) must authenticate, and the
// endpoint it names be routed here (it is waited for a while). st.ep is
// then that endpoint, with the request counted on it but not in its load,
// which the sending node reports; st.hop keeps the request on it.
func (p *Proxy) admitHop(st *reqState, host, hop, remote string) *refusal {
	name := p.appName(host)
	id, ok := p.hop.Load().verify(hop, host, p.clock.Now().Unix())
	if !ok {
		p.clientMistake("proxy: a request whose hop header fails authentication refused", "remote", remote, "app", name)
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
	e.finish(st, p.clock.Now())
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
			if e != nil && e.node == "" {
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
	p := x.c.f.p
	host := x.hostBytes()
	val := ""
	now := p.clock.Now().Unix()
	if s := e.stamp.Load(); s != nil && s.ts == now && s.host == string(host) {
		val = s.val
	} else {
		val = p.stampHop(e, string(host), now)
	}
	h := x.head - 2 // before the empty line
	b := append(x.hopBuf[:0], x.out[:h]...)
	b = append(b, HopHeader+": "...)
	b = append(b, val...)
	b = append(b, "\r\n"...)
	x.hopBuf = append(b, x.out[h:]...)
	return x.hopBuf
}
