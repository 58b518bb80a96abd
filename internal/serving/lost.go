package serving

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/shoal-run/shoal/internal/errdefs"
)

// refreshLive reads the live nodes of the cluster and hands them to the
// dispatcher: calls in flight to a node that left end.
func (m *Manager) refreshLive() error {
	ctx, cancel := context.WithTimeout(m.ctx, 5*time.Second)
	defer cancel()
	nodes, err := m.o.Cluster.Nodes(ctx)
	if err != nil {
		return fmt.Errorf("serving: live nodes: %w", err)
	}
	if gone := m.disp.SetLive(nodes); len(gone) > 0 {
		m.log.Warn("serving: nodes lost", "nodes", gone)
	}
	return nil
}

// heal follows the live node set: while this node leads, the replicas of
// a node that is no longer live are lost, and replaced on live nodes.
func (m *Manager) heal() {
	if err := m.refreshLive(); err != nil {
		if m.ctx.Err() == nil {
			m.log.Warn("serving: live nodes unknown; nothing healed", "err", err)
		}
		return
	}
	m.mu.Lock()
	ctls := make([]*appCtl, 0, len(m.apps))
	for _, ctl := range m.apps {
		ctls = append(ctls, ctl)
	}
	m.mu.Unlock()
	for _, ctl := range ctls {
		ctl.lose(m.disp.IsLive)
	}
}

// lose drops the app's replicas on nodes that are not live: they leave the
// route at once, their records are deleted, and the controller, woken,
// replaces them. Nothing is called on their node; one that comes back
// removes their containers, which no record names any more.
func (ctl *appCtl) lose(live func(node string) bool) {
	m := ctl.m
	ctl.mu.Lock()
	n := 0
	for id, r := range ctl.reps {
		node := r.rec.Node
		if node == "" {
			node = m.disp.Where(id) // placed, its start under way
		}
		if live(node) {
			continue
		}
		ctl.move(r, mvLose, fmt.Sprintf("node %s is lost; the replica is replaced on a live node", node), nil)
		m.self.forget(r.rec.TokenHash)
		n++
	}
	if n > 0 {
		ctl.publish()
	}
	ctl.unlock()
	if n > 0 {
		ctl.notify()
	}
}

// draining reports whether node is a cluster node that is draining: its
// replicas move to other nodes.
func (m *Manager) draining(node string) bool {
	return m.disp != nil && m.disp.Draining(node)
}

// unreachable gives up a replica whose checks failed because its node,
// another of the cluster, did not answer (err is errdefs.ErrUnavailable):
// the node is likely lost before its lease says so. The replica is not
// counted as failing (no back-off): it drains, and the controller replaces
// it. It reports whether that was the case.
func (ctl *appCtl) unreachable(r *replica, err error) bool {
	m := ctl.m
	if m.disp == nil || !errors.Is(err, errdefs.ErrUnavailable) {
		return false
	}
	ctl.mu.Lock()
	node := r.rec.Node
	if node == "" || node == m.o.Node || r.state.exiting() {
		ctl.unlock()
		return node != "" && node != m.o.Node
	}
	why := fmt.Sprintf("node %s does not answer: %v", node, err)
	m.emit("lost", ctl.name, r.rec.ID, why, nil)
	ctl.drain(r, why)
	ctl.unlock()
	ctl.notify()
	return true
}
