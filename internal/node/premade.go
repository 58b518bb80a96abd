package node

import "context"

// Premaker is a node that makes a replica ahead of its start: its
// sandbox (namespaces, cgroup with its limits, root file system, network,
// log) with a small pid 1 that waits, so that a cold start only has that
// pid 1 exec the app's entrypoint. serving keeps such a sandbox for an app
// at zero replicas (the pre-made tier) where its node is one; a premade
// replica not booted is removed as any other, with Stop and Remove.
type Premaker interface {
	// Premake makes replica s up to its entrypoint: its container runs a
	// pid 1 that waits for Boot. What it made before an error is freed by
	// Remove.
	Premake(ctx context.Context, s ReplicaSpec) (Premade, error)
	// Boot has premade replica id's pid 1 exec the app's entrypoint (with
	// the spec's environment, user and working directory): the replica
	// then runs as one Start would have started.
	Boot(ctx context.Context, id string) error
}

// Premade is a replica made ahead: where it will answer once booted, and
// the memory its idle sandbox holds.
type Premade struct {
	Started
	Memory int64
}
