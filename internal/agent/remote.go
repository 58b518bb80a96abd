package agent

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"net/url"
	"time"

	"github.com/shoal-run/shoal/internal/errdefs"
	"github.com/shoal-run/shoal/internal/manifest"
	"github.com/shoal-run/shoal/internal/node"
)

// Remote is another node's replicas as a node.Node: each call is made
// by that node's agent on its own local Node, bounded by the caller's
// context. Errors keep their errdefs kind; a node that cannot be reached
// is errdefs.ErrUnavailable.
type Remote struct {
	c    *Client
	node string
}

var _ node.Node = (*Remote)(nil)

// Remote returns node's replicas as a node.Node.
func (c *Client) Remote(node string) *Remote {
	return &Remote{c: c, node: node}
}

// Node is the name of the node it calls.
func (r *Remote) Node() string { return r.node }

func (r *Remote) path(id, what string) string { return "replicas/" + url.PathEscape(id) + "/" + what }

func (r *Remote) post(ctx context.Context, path string, in, out any) error {
	return r.c.call(ctx, r.node, http.MethodPost, path, in, out)
}

// Start starts the replica on the node (which first fetches its image if
// it lacks it).
func (r *Remote) Start(ctx context.Context, s node.ReplicaSpec) (node.Started, error) {
	var st started
	if err := r.post(ctx, "replicas/start", toSpec(s), &st); err != nil {
		return node.Started{}, err
	}
	return st.started(r.node), nil
}

// Freeze freezes the replica and returns the memory it holds frozen.
func (r *Remote) Freeze(ctx context.Context, id string) (int64, error) {
	var f freezeResp
	err := r.post(ctx, r.path(id, "freeze"), nil, &f)
	return f.Memory, err
}

// Thaw thaws the replica.
func (r *Remote) Thaw(ctx context.Context, id string) error {
	return r.post(ctx, r.path(id, "thaw"), nil, nil)
}

// Drain returns when the node's proxy has no request to the replica in
// flight, or with an error once grace has passed.
func (r *Remote) Drain(ctx context.Context, id string, grace time.Duration) error {
	return r.post(ctx, r.path(id, "drain"), graceReq{Grace: grace}, nil)
}

// Stop ends the replica's process (SIGTERM, SIGKILL after grace).
func (r *Remote) Stop(ctx context.Context, id string, grace time.Duration) error {
	return r.post(ctx, r.path(id, "stop"), graceReq{Grace: grace}, nil)
}

// Wait returns when the replica's process exits: a long poll, asked again
// each time the node answers that it still runs, until ctx ends.
func (r *Remote) Wait(ctx context.Context, id string) (node.ExitStatus, error) {
	for {
		var w waitResp
		if err := r.post(ctx, r.path(id, "wait"), nil, &w); err != nil {
			return node.ExitStatus{}, err
		}
		if w.Exited {
			return w.Status.status(), nil
		}
		if err := ctx.Err(); err != nil {
			return node.ExitStatus{}, err
		}
	}
}

// Check checks the replica once on its node (where its address is
// reachable).
func (r *Remote) Check(ctx context.Context, id, addr string, h manifest.Health) error {
	return r.post(ctx, r.path(id, "check"), checkReq{Addr: addr, Health: h}, nil)
}

// Usage is the replica's cumulative CPU counters.
func (r *Remote) Usage(ctx context.Context, id string) (node.CPUUse, error) {
	var u usageResp
	err := r.post(ctx, r.path(id, "usage"), nil, &u)
	return node.CPUUse{Periods: u.Periods, Throttled: u.Throttled, Used: time.Duration(u.UsedNs), Stalled: time.Duration(u.StalledNs), Pressure: u.Pressure}, err
}

// SetCPU changes the replica's CPU quota live.
func (r *Remote) SetCPU(ctx context.Context, id string, cpus float64) error {
	return r.post(ctx, r.path(id, "cpu"), cpuReq{CPUs: cpus}, nil)
}

// Remove deletes the replica's container and frees its place and address.
func (r *Remote) Remove(ctx context.Context, id string) error {
	return r.post(ctx, r.path(id, "remove"), nil, nil)
}

// adoptTries is how many times Adopt asks a node it cannot reach, with
// adoptPause between: a daemon restarting under a live lease answers
// again within moments.
const (
	adoptTries = 3
	adoptPause = 500 * time.Millisecond
)

// Adopt asks the node what it has of replica k, asking again
// (adoptTries in all) while the node cannot be reached; then the error.
func (r *Remote) Adopt(ctx context.Context, k node.Known) (node.Adopted, error) {
	var err error
	for try := 1; try <= adoptTries; try++ {
		var a adopted
		if err = r.post(ctx, "replicas/adopt", toKnown(k), &a); err == nil {
			return a.adopted(), nil
		}
		if !errors.Is(err, errdefs.ErrUnavailable) || try == adoptTries {
			break
		}
		select {
		case <-ctx.Done():
			return node.Adopted{}, fmt.Errorf("replica %s: adopt: %w", k.ID, err)
		case <-time.After(adoptPause):
		}
	}
	return node.Adopted{}, fmt.Errorf("replica %s: adopt: %w", k.ID, err)
}

// Release frees the replica's place on the node.
func (r *Remote) Release(ctx context.Context, id string) error {
	return r.post(ctx, r.path(id, "release"), nil, nil)
}
