package cluster

import (
	"context"
	"fmt"
	"time"

	"github.com/shoal-run/shoal/internal/api/types"
	"github.com/shoal-run/shoal/internal/bench"
	shcluster "github.com/shoal-run/shoal/internal/cluster"
	"github.com/shoal-run/shoal/internal/cluster/clustertest"
)

// Rows of the node death table.
const (
	rowDown   = "a follower node dies → listed down"
	rowLeader = "the leader node dies → another node leads"
)

var deathRows = []string{rowDown, rowLeader}

// roles returns the leader and the followers as a surviving node lists them
// once every node is ready.
func (e *env) roles(ctx context.Context) (leader *clustertest.Node, followers []*clustertest.Node, err error) {
	m, err := e.waitAll(ctx, e.c.Nodes[0], "all nodes ready with a leader", e.allReady)
	if err != nil {
		return nil, nil, err
	}
	name := clustertest.Leader(m)
	for _, nd := range e.c.Nodes {
		if nd.Name == name {
			leader = nd
		} else {
			followers = append(followers, nd)
		}
	}
	return leader, followers, nil
}

// followerDeath powers off a follower (each run the next one) and returns
// the milliseconds until a surviving node lists it down.
func (e *env) followerDeath(ctx context.Context, i int) (float64, error) {
	leader, followers, err := e.roles(ctx)
	if err != nil {
		return 0, err
	}
	victim := followers[i%len(followers)]
	return e.death(ctx, victim, leader, func(m map[string]types.Node) bool {
		return m[victim.Name].State == shcluster.StateDown
	})
}

// leaderDeath powers off the leader and returns the milliseconds until a
// surviving node lists another node as leader.
func (e *env) leaderDeath(ctx context.Context, i int) (float64, error) {
	leader, followers, err := e.roles(ctx)
	if err != nil {
		return 0, err
	}
	return e.death(ctx, leader, followers[i%len(followers)], func(m map[string]types.Node) bool {
		l := clustertest.Leader(m)
		return l != "" && l != leader.Name
	})
}

// death powers victim off, times until watcher's node list passes seen,
// and brings the victim back.
func (e *env) death(ctx context.Context, victim, watcher *clustertest.Node, seen func(map[string]types.Node) bool) (float64, error) {
	t0 := time.Now()
	if err := victim.PowerOff(); err != nil {
		return 0, fmt.Errorf("power off %s: %w", victim.Name, err)
	}
	_, err := e.waitAll(ctx, watcher, victim.Name+" dead, seen from "+watcher.Name, seen)
	took := time.Since(t0)
	if perr := e.powerOn(ctx, victim); perr != nil && err == nil {
		err = perr
	}
	if err != nil {
		return 0, err
	}
	return bench.Millis(took)[0], nil
}

// powerOn brings victim back and waits until every node is ready again.
func (e *env) powerOn(ctx context.Context, victim *clustertest.Node) error {
	if err := victim.PowerOn(ctx); err != nil {
		return fmt.Errorf("power on %s: %w", victim.Name, err)
	}
	_, err := e.waitAll(ctx, victim, "every node ready after "+victim.Name+" came back", e.allReady)
	return err
}
