package serving

import (
	"context"

	"github.com/shoal-run/shoal/internal/cluster"
	"github.com/shoal-run/shoal/internal/node"
)

// The controller reaches replicas only through a node.Node (see package
// node): this host's (localnode), another host's (agent.Remote), or, on a
// cluster's leader, the dispatcher over them all. serving speaks of its
// types under these names.
type (
	Node        = node.Node
	ReplicaSpec = node.ReplicaSpec
	Started     = node.Started
	Known       = node.Known
	Adopted     = node.Adopted
	ExitStatus  = node.ExitStatus
	Mount       = node.Mount
	LogTail     = node.LogTail
	LogCursor   = node.LogCursor
)

// Dispatcher is the nodes of a cluster as one Node, the leader's (package
// dispatch): Start places a replica on a live node, every other call goes
// to the node the replica is on. The controller also tells it the live
// nodes, and asks it where replicas are and what the live nodes are.
type Dispatcher interface {
	Node
	// Reset forgets every placed replica: a new lead adopts them again.
	Reset()
	// SetLive makes nodes the live set: calls in flight to a node that
	// left it end. It returns the names of the nodes that left.
	SetLive(nodes []cluster.Node) (gone []string)
	// IsLive reports whether node is live (this host always is).
	IsLive(node string) bool
	// Draining reports whether live node is draining.
	Draining(node string) bool
	// FrozenBudget is node's budget for frozen replicas (0: not known).
	FrozenBudget(node string) int64
	// Where is the node replica id was placed on ("": not known).
	Where(id string) string
	// ReadLog reads the last n lines of replica id's log, whose path on
	// this host is path, from the node the replica is on.
	ReadLog(ctx context.Context, id, path string, n int) (LogTail, error)
	// FollowLog reads what replica id's log gained since c, from the node
	// the replica is on.
	FollowLog(ctx context.Context, id, path string, c LogCursor) (LogTail, error)
}
