// Package node is the contract between an app's controller (serving) and
// a host that runs its replicas: the Node interface and the types its
// calls carry. This host's Node is localnode's; another host's is
// agent.Remote; a cluster's leader reaches every node through one
// dispatcher that is a Node too.
package node

import (
	"context"
	"syscall"
	"time"

	"github.com/shoal-run/shoal/internal/manifest"
)

// Node carries out, where a replica runs, what the app's controller
// decides for it. The controller holds the app's state and makes every
// decision; it reaches the runtime, the network and placement only
// through a Node, and never while it holds its lock.
//
// Node is made of four small interfaces, so that a caller that needs one
// part asks for that part only. Every call takes a context, which bounds
// it (a Node that reaches another host honours it), and returns an error.
type Node interface {
	Ladder
	Observer
	Resizer
	Keeper
}

// Ladder walks a replica along the homeostasis ladder.
type Ladder interface {
	// Start places the replica, gives it an address and runs its
	// container; it returns once the container runs, ready or not. What
	// it made before an error is freed by Remove.
	Start(ctx context.Context, s ReplicaSpec) (Started, error)
	// Freeze freezes a replica that takes no traffic and returns the
	// memory it holds frozen.
	Freeze(ctx context.Context, id string) (memory int64, err error)
	// Thaw thaws a frozen replica.
	Thaw(ctx context.Context, id string) error
	// Drain returns when no request to replica id is in flight, or with an
	// error once grace has passed.
	Drain(ctx context.Context, id string, grace time.Duration) error
	// Stop ends replica id's process: SIGTERM, then SIGKILL after grace
	// (at once for 0).
	Stop(ctx context.Context, id string, grace time.Duration) error
}

// Observer is what the controller must see of a running replica.
type Observer interface {
	// Wait returns when replica id's process exits.
	Wait(ctx context.Context, id string) (ExitStatus, error)
	// Check checks replica id once with h: the command in its container,
	// or a probe of its address.
	Check(ctx context.Context, id, addr string, h manifest.Health) error
	// Usage is replica id's cumulative CPU counters.
	Usage(ctx context.Context, id string) (CPUUse, error)
}

// CPUUse is a replica's cumulative CPU counters: what the vertical
// scaler judges its want of CPU by.
type CPUUse struct {
	// Periods and Throttled are its CFS periods with work, and those in
	// which it hit its quota.
	Periods, Throttled uint64
	// Used is the CPU time it used.
	Used time.Duration
	// Stalled is how long some task of it waited for a CPU (PSI "some"),
	// where its cgroup tells (Pressure).
	Stalled  time.Duration
	Pressure bool
}

// Resizer changes a running replica's resources: the vertical scaler's
// part.
type Resizer interface {
	// SetCPU changes replica id's CPU quota live.
	SetCPU(ctx context.Context, id string, cpus float64) error
}

// Keeper keeps account of what replicas hold on the node across their
// end and across a daemon restart.
type Keeper interface {
	// Remove deletes replica id's container, then frees its place and
	// address. The container's error comes back first: a container not
	// removed may still write to its state.
	Remove(ctx context.Context, id string) error
	// Adopt finds replica r, left by an earlier daemon: whether it runs,
	// whether frozen, and its PID; it takes its place back. A replica
	// the node does not have is not running, with no error; an error is
	// a node that could not tell.
	Adopt(ctx context.Context, r Known) (Adopted, error)
	// Release frees replica id's place before its removal, so that its
	// replacement may take it.
	Release(ctx context.Context, id string) error
}

// Known is what the store knew of a replica that a node is asked to
// adopt.
type Known struct {
	ID     string
	App    string
	CPUSet string // the CPUs it was pinned to, or ""
	// Node is the cluster node its record names ("" on a single host);
	// CPU and Memory are what it asks (its revision's resources), for
	// the cluster's placement.
	Node   string
	CPU    float64
	Memory int64
	// Port is the port its revision serves on: the node tells its address
	// by it when the record has none.
	Port int
}

// ReplicaSpec is what a node needs to start a replica.
type ReplicaSpec struct {
	ID       string
	App      string
	Revision int
	Digest   string // the image, by manifest digest
	Config   manifest.Config
	// Env is added to the image's and the config's environment.
	Env []string
	// Mounts are the app's volumes and the replica's state area.
	Mounts []Mount
	// Log is the file that takes the container's stdout and stderr.
	Log string
	// ImageFrom is the cluster node that has the image, for a node that
	// lacks it ("" on a single host).
	ImageFrom string
	// Checkpointable makes a replica a checkpoint can be taken of, where
	// the node can (its Checkpoint).
	Checkpointable bool `json:",omitempty"`
	// RestoreFrom, when set, is a checkpoint the node took (its
	// Checkpoint's dir): the replica's processes are restored from it
	// instead of booted.
	RestoreFrom string `json:",omitempty"`
}

// Started is a replica whose container runs.
type Started struct {
	Addr   string // host:port the proxy and health checks reach
	Pid    int
	CPUSet string // the CPUs it is pinned to, or ""
	// Node is the cluster node it was placed on ("" on a single host).
	Node string
}

// Adopted is what a node found of a replica at a restart.
type Adopted struct {
	Running bool // its container runs (or is frozen)
	Frozen  bool
	Pid     int
	Addr    string // its address, where the node can tell it
	// Memory is what a frozen one holds, in bytes, where the node can
	// tell it.
	Memory int64
}

// ExitStatus is how a replica's process ended.
type ExitStatus struct {
	// Code is the exit code, or 128+signal when killed by a signal.
	Code   int
	Signal syscall.Signal
	// OOMKilled: the kernel's OOM killer ended it.
	OOMKilled bool
	// Known is false when the status could not be read (a replica
	// adopted after a restart is not the daemon's child).
	Known bool
}

// Mount is a host path (or a tmpfs) a replica's container sees.
type Mount struct {
	Source      string
	Destination string
	ReadOnly    bool
	// Type is "bind" (default) or "tmpfs".
	Type    string
	Options []string
	// SizeBytes limits a tmpfs.
	SizeBytes int64
}
