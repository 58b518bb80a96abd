package serving

import (
	"context"

	"github.com/shoal-run/shoal/internal/clock"

	"encoding/json"
	"strings"
	"time"

	"github.com/shoal-run/shoal/internal/route"
	"github.com/shoal-run/shoal/internal/store"
)

// watchRemote keeps each app's route in step with the replicas other nodes
// record in the store: a ready replica of another node is routed like a
// local one, and leaves the route when its record changes state or goes.
// Local replicas are routed straight from the controller, which does not
// wait for the store.
func (m *Manager) watchRemote() {
	defer m.wg.Done()
	for m.ctx.Err() == nil {
		ch, err := m.o.Store.Watch(m.ctx, store.ReplicasRoot)
		if err != nil {
			m.log.Warn("serving: watch replicas", "err", err)
			sleep(m.ctx, m.clock, time.Second)
			continue
		}
		kvs, err := m.o.Store.List(m.ctx, store.ReplicasRoot)
		if err != nil {
			m.log.Warn("serving: list replicas", "err", err)
			sleep(m.ctx, m.clock, time.Second)
			continue
		}
		remote := map[string]map[string]route.Endpoint{}
		for _, kv := range kvs {
			if app, ep, ok := remoteEndpoint(m.o.Node, kv.Value); ok {
				if remote[app] == nil {
					remote[app] = map[string]route.Endpoint{}
				}
				remote[app][ep.ID] = ep
			}
		}
		m.setRemote(remote)
		for ev := range ch {
			app, id, ok := splitReplicaKey(ev.KV.Key)
			if !ok {
				continue
			}
			eps := copyEndpoints(remote[app])
			delete(eps, id)
			if ev.Type == store.EventPut {
				if a, ep, ok := remoteEndpoint(m.o.Node, ev.KV.Value); ok && a == app {
					eps[id] = ep
				}
			}
			remote[app] = eps
			if c := m.app(app); c != nil {
				c.setRemote(eps)
			}
		}
	}
}

// remoteEndpoint is the endpoint of a replica record if it is the ready
// replica of a node other than node.
func remoteEndpoint(node string, val []byte) (string, route.Endpoint, bool) {
	var rec replicaRecord
	if json.Unmarshal(val, &rec) != nil || rec.Node == node || rec.State != StateReady || rec.Addr == "" {
		return "", route.Endpoint{}, false
	}
	return rec.App, route.Endpoint{ID: rec.ID, Addr: rec.Addr, Revision: rec.Revision}, true
}

func (m *Manager) setRemote(remote map[string]map[string]route.Endpoint) {
	m.mu.Lock()
	ctls := make(map[string]*appCtl, len(m.apps))
	for n, c := range m.apps {
		ctls[n] = c
	}
	m.mu.Unlock()
	for n, c := range ctls {
		c.setRemote(remote[n])
	}
}

func (ctl *appCtl) setRemote(eps map[string]route.Endpoint) {
	ctl.mu.Lock()
	defer ctl.unlock()
	if len(eps) == 0 && len(ctl.remote) == 0 {
		return
	}
	ctl.remote = eps
	ctl.publish()
}

// sleep waits for d on clock c, or until ctx ends.
func sleep(ctx context.Context, c clock.Clock, d time.Duration) {
	t := c.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C():
	case <-ctx.Done():
	}
}

func splitReplicaKey(key string) (app, id string, ok bool) {
	rest, ok := strings.CutPrefix(key, store.ReplicasRoot)
	if !ok {
		return "", "", false
	}
	return strings.Cut(rest, "/")
}

func copyEndpoints(in map[string]route.Endpoint) map[string]route.Endpoint {
	out := make(map[string]route.Endpoint, len(in)+1)
	for k, v := range in {
		out[k] = v
	}
	return out
}
