package daemon

import (
	"context"
	"sync"

	"github.com/shoal-run/shoal/internal/clock"
	"github.com/shoal-run/shoal/internal/cluster"
)

// leadership is this node's part in the cluster's leadership, the one
// thing the daemon hands every leader-only subsystem (the routes, serving,
// the job queue): the cluster.Hub they are registered with, over the
// membership read from the store. It is made on etcd before those
// subsystems, and follows the membership at once; the Hub's loop starts
// once the node has joined and campaigns (follow): until then the node
// follows.
type leadership struct {
	hub     *cluster.Hub
	members *cluster.StoreMembers
	ctx     context.Context
	stop    context.CancelFunc
	wg      sync.WaitGroup
}

// newLeadership returns the leadership of a node of the cluster on d's
// store, following its membership.
func (d *Daemon) newLeadership() *leadership {
	l := &leadership{members: cluster.NewStoreMembers(d.store, clock.Real{}, d.log)}
	l.hub = cluster.NewHub(l.members, clock.Real{}, d.log)
	l.ctx, l.stop = context.WithCancel(context.Background())
	l.wg.Add(1)
	go func() { defer l.wg.Done(); l.members.Run(l.ctx) }()
	return l
}

// follow runs the Hub over el's terms until ctx ends; the lead it holds
// then is revoked before it returns.
func (l *leadership) follow(ctx context.Context, el cluster.Elections, wg *sync.WaitGroup) {
	wg.Add(1)
	go func() { defer wg.Done(); l.hub.Run(ctx, el) }()
}

// leading reports whether this node leads.
func (l *leadership) leading() bool { return l.hub.Leading() != nil }

// close stops following the membership.
func (l *leadership) close() {
	l.stop()
	l.wg.Wait()
}
