package types

import (
	"fmt"
	"time"
)

// DeployRequest is the body of POST /v1/apps: an app's shoal.toml, as text.
// File names the manifest in error messages (default "shoal.toml").
type DeployRequest struct {
	Manifest string `json:"manifest"`
	File     string `json:"file,omitempty"`
}

// LogsRequest selects what GET /v1/apps/{name}/logs shows (its query:
// tail, since, replica, follow, timestamps): the replicas' lines merged by
// time, the last Tail of them (0: all kept) at or after Since (zero: all),
// of the replicas whose id starts with Replica, with their stamps if
// Timestamps; with Follow, then the lines written later until the request
// ends.
type LogsRequest struct {
	Tail       int
	Since      time.Time
	Replica    string
	Follow     bool
	Timestamps bool
}

// ParseSince reads a LogsRequest's since: "" (zero: all), a duration
// before now ("10m", "1h30m"), or an RFC 3339 time ("2026-01-02T15:04:05Z").
func ParseSince(v string, now time.Time) (time.Time, error) {
	if v == "" {
		return time.Time{}, nil
	}
	if d, err := time.ParseDuration(v); err == nil && d >= 0 {
		return now.Add(-d), nil
	}
	if t, err := time.Parse(time.RFC3339Nano, v); err == nil {
		return t, nil
	}
	return time.Time{}, fmt.Errorf("%q is neither a duration (10m, 1h30m) nor an RFC 3339 time (2026-01-02T15:04:05Z)", v)
}

// ScaleRequest is the body of POST /v1/apps/{name}/scale; a nil bound is
// left as it is.
type ScaleRequest struct {
	Min *int `json:"min,omitempty"`
	Max *int `json:"max,omitempty"`
}

// App is an app and its replicas, the body of GET /v1/apps/{name} and of
// each row of GET /v1/apps.
type App struct {
	Name     string `json:"name"`
	Image    string `json:"image"`
	Revision int    `json:"revision"`
	Min      int    `json:"min"`
	Max      int    `json:"max"`
	// State is "idle" (no replica running), "running", "failing" (its
	// replicas crash or fail their health check; see Error and Log) or
	// "deleting". An app whose only failures are those of the revision
	// rolling out is "running" while another revision serves: the
	// rollout carries the failures.
	State     string    `json:"state"`
	URL       string    `json:"url,omitempty"`
	Ready     int       `json:"ready"`
	Replicas  []Replica `json:"replicas"`
	CreatedAt time.Time `json:"created_at"`
	UpdatedAt time.Time `json:"updated_at"`
	// Error and Log explain a failing app, or a rollout with failures:
	// the last failure and the last lines its replica wrote.
	Error string   `json:"error,omitempty"`
	Log   []string `json:"log,omitempty"`
	// Warnings, in a deploy's answer only, are what the deployed
	// manifest may have got wrong (each also a "warning" event).
	Warnings []string `json:"warnings,omitempty"`
	// Rollout is the app's last rollout of a revision (nil before the
	// first deploy's record was written by a daemon that keeps them).
	Rollout *Rollout `json:"rollout,omitempty"`
	// Traffic is how requests are split between revisions, in percent.
	Traffic []TrafficTarget `json:"traffic,omitempty"`
	// Sticky keeps a client on its replica (cookie shoal-replica).
	Sticky bool `json:"sticky,omitempty"`
	// Waiting says what keeps one of a stateful app's ordinals from
	// starting (in a cluster: the node that holds its volumes is lost).
	Waiting string `json:"waiting,omitempty"`
	// TCP is where a TCP app's port listens on the proxy's host, or
	// TCPError why it does not (the port taken, or another app's).
	TCP      string `json:"tcp,omitempty"`
	TCPError string `json:"tcp_error,omitempty"`
	// Premade is the id of the app's next replica, made ahead and waiting
	// for its first request ("": none, or still being made).
	Premade string `json:"premade,omitempty"`
}

// Rollout states.
const (
	RolloutProgressing = "progressing" // the revision's replicas are starting
	RolloutDone        = "done"        // traffic moved to the revision
	RolloutRolledBack  = "rolled_back" // it never became ready; traffic stayed on From
	RolloutFailed      = "failed"      // it never became ready and no earlier revision exists
)

// Rollout is the progress of one revision's rollout: its replicas start
// and become ready (Ready of Want) before traffic moves from revision From.
type Rollout struct {
	Revision int    `json:"revision"`
	From     int    `json:"from,omitempty"`
	State    string `json:"state"`
	Ready    int    `json:"ready"`
	Want     int    `json:"want"`
	// Failures counts the revision's replicas that failed (crashed, did
	// not start, or never passed a check) while it rolls out; Reason is
	// then the last failure. After [health] failures of them it is rolled
	// back.
	Failures  int        `json:"failures,omitempty"`
	Reason    string     `json:"reason,omitempty"`
	StartedAt time.Time  `json:"started_at"`
	DoneAt    *time.Time `json:"done_at,omitempty"`
}

// TrafficTarget is one revision's share of an app's requests.
type TrafficTarget struct {
	Revision int `json:"revision"`
	Percent  int `json:"percent"`
}

// RollbackRequest is the body of POST /v1/apps/{name}/rollback; To 0 is
// the revision before the current one.
type RollbackRequest struct {
	To int `json:"to,omitempty"`
}

// TrafficRequest is the body of PUT /v1/apps/{name}/traffic: percents of
// existing revisions that add up to 100.
type TrafficRequest struct {
	Traffic []TrafficTarget `json:"traffic"`
	Sticky  bool            `json:"sticky,omitempty"`
}

// Replica is one replica of an app.
type Replica struct {
	ID       string `json:"id"`
	Revision int    `json:"revision"`
	// State is pending, starting, ready, frozen, halted, draining, stopped or
	// failed.
	State     string     `json:"state"`
	Pid       int        `json:"pid"` // 0 until its process runs
	Addr      string     `json:"addr,omitempty"`
	StartedAt time.Time  `json:"started_at"`
	ReadyAt   *time.Time `json:"ready_at,omitempty"`
	CPU       float64    `json:"cpu,omitempty"` // current quota in cores
	// CPUSet is the CPUs the replica is pinned to ("" when it is not).
	CPUSet string `json:"cpuset,omitempty"`
	// Node is the cluster node the replica runs on ("" on a single host,
	// and until a replica being started is placed).
	Node     string `json:"node,omitempty"`
	InFlight int    `json:"in_flight"`
	Reason   string `json:"reason,omitempty"`
	// Ordinal is its ordinal in a stateful app (its stable name is
	// <app>-<ordinal>); nil in other apps.
	Ordinal *int `json:"ordinal,omitempty"`
}

// Event is one entry of the event log (GET /v1/events): a scaling decision
// or a replica's change of state, with the reason and the inputs behind it.
type Event struct {
	Seq     int64              `json:"seq"`
	Time    time.Time          `json:"time"`
	Kind    string             `json:"kind"`
	App     string             `json:"app,omitempty"`
	Replica string             `json:"replica,omitempty"`
	Reason  string             `json:"reason"`
	Inputs  map[string]float64 `json:"inputs,omitempty"`
}
