package serving

import "github.com/shoal-run/shoal/internal/node"

// The controller reaches replicas only through a node.Node (see package
// node): this host's (localnode), another host's (agent.Remote), or, on a
// cluster's leader, the dispatcher over them all. serving speaks of its
// types under these names.
type (
	Node         = node.Node
	ReplicaSpec  = node.ReplicaSpec
	Started      = node.Started
	Known        = node.Known
	Adopted      = node.Adopted
	ExitStatus   = node.ExitStatus
	Mount        = node.Mount
	LogTail      = node.LogTail
	LogTailer    = node.LogTailer
	StateCarrier = node.StateCarrier
	StateSource  = node.StateSource
)

// StateMax bounds the state area a replica on another node leaves: what
// the leader fetches to merge.
const StateMax = node.StateMax
