package serving

import (
	"time"

	"github.com/shoal-run/shoal/internal/api/types"
	"github.com/shoal-run/shoal/internal/manifest"
)

// appRecord is an app's desired state, kept at store.AppKey(name).
type appRecord struct {
	Config   manifest.Config `json:"config"`
	Manifest string          `json:"manifest"`
	Revision int             `json:"revision"`
	Digest   string          `json:"digest"` // image manifest digest of the revision
	Hash     string          `json:"hash"`   // config hash of the revision
	Min      int             `json:"min"`    // current bounds (deploy, then `app scale`)
	Max      int             `json:"max"`
	Created  time.Time       `json:"created"`
	Updated  time.Time       `json:"updated"`
	Deleting bool            `json:"deleting,omitempty"`
	// Traffic splits requests between revisions (empty: all to Revision).
	Traffic []trafficShare `json:"traffic,omitempty"`
	Sticky  bool           `json:"sticky,omitempty"`
	// Rollout is the last revision's rollout.
	Rollout *rollout `json:"rollout,omitempty"`
	// VolumeNodes are, in a cluster, the nodes that hold the volumes of a
	// stateful app's ordinals (ordinal → node): where each starts again.
	VolumeNodes map[int]string `json:"volume_nodes,omitempty"`
}

// trafficShare is one revision's share of an app's requests, as stored in
// its record (the API's is types.TrafficTarget).
type trafficShare struct {
	Revision int `json:"revision"`
	Percent  int `json:"percent"`
}

// States of a rollout, as stored; the API shows them as they are.
const (
	rolloutProgressing = "progressing" // the revision's replicas are starting
	rolloutDone        = "done"        // traffic moved to the revision
	rolloutRolledBack  = "rolled_back" // it never became ready; traffic stayed on From
	rolloutFailed      = "failed"      // it never became ready and no earlier revision exists, or it was a requested rollback
)

// rollout is the rollout of an app's last revision, as stored in its
// record (the API's is types.Rollout).
type rollout struct {
	Revision int `json:"revision"`
	From     int `json:"from,omitempty"`
	// Requested marks a rollback an operator asked for (a stateful
	// app's, which progresses): if it fails it is never undone.
	Requested bool       `json:"requested,omitempty"`
	State     string     `json:"state"`
	Ready     int        `json:"ready"`
	Want      int        `json:"want"`
	Failures  int        `json:"failures,omitempty"`
	Reason    string     `json:"reason,omitempty"`
	StartedAt time.Time  `json:"started_at"`
	DoneAt    *time.Time `json:"done_at,omitempty"`
}

// wire is ro as the API shows it.
func (ro rollout) wire() *types.Rollout {
	return &types.Rollout{Revision: ro.Revision, From: ro.From, State: ro.State, Ready: ro.Ready, Want: ro.Want,
		Failures: ro.Failures, Reason: ro.Reason, StartedAt: ro.StartedAt, DoneAt: ro.DoneAt}
}

// revisionRecord is one immutable revision, kept at store.RevisionKey.
type revisionRecord struct {
	N        int             `json:"n"`
	Config   manifest.Config `json:"config"`
	Manifest string          `json:"manifest"`
	Digest   string          `json:"digest"`
	Hash     string          `json:"hash"`
	Created  time.Time       `json:"created"`
}

// replicaRecord is a replica as the store knows it, at store.ReplicaKey.
type replicaRecord struct {
	ID       string `json:"id"`
	App      string `json:"app"`
	Revision int    `json:"revision"`
	Node     string `json:"node"`
	State    State  `json:"state"` // as listed (State.listed)
	Pid      int    `json:"pid,omitempty"`
	// Ordinal is its ordinal in a stateful app (nil: none); its stable
	// name is <app>-<ordinal>.
	Ordinal   *int       `json:"ordinal,omitempty"`
	Addr      string     `json:"addr,omitempty"`
	CPU       float64    `json:"cpu,omitempty"`
	CPUSet    string     `json:"cpuset,omitempty"` // CPUs it is pinned to
	StartedAt time.Time  `json:"started_at"`
	ReadyAt   *time.Time `json:"ready_at,omitempty"`
	// Restored is set for a replica restored from a checkpoint: its
	// ReadyAt tells the restore, not its app's boot, and its app is one
	// worth checkpointing again (slowBoot), also after a restart.
	Restored bool `json:"restored,omitempty"`
	// FrozenAt and Memory (bytes in use) are a frozen replica's, kept so
	// that a restarted daemon keeps its freeze timer and counts it in the
	// frozen-memory budget at what it holds.
	FrozenAt *time.Time `json:"frozen_at,omitempty"`
	Memory   int64      `json:"memory,omitempty"`
	Reason   string     `json:"reason,omitempty"`
	// TokenHash is the SHA-256 of the replica's $SHOAL_TOKEN; the token
	// itself is never stored.
	TokenHash string `json:"token_hash,omitempty"`
}
