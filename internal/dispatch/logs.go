package dispatch

import (
	"context"
	"fmt"
	"os"

	"github.com/shoal-run/shoal/internal/errdefs"
	"github.com/shoal-run/shoal/internal/node"
)

// ReadLog reads the last n lines of replica id's log, whose path on this
// host is path: from this host's file, or, for a replica placed on another
// node, from that node through its TailLog. A node that does not answer
// is an error, as is one whose Node cannot read logs.
func (d *Dispatcher) ReadLog(ctx context.Context, id, path string, n int) (node.LogTail, error) {
	nd, ctx, done, err := d.to(ctx, id)
	if err != nil {
		return node.LogTail{}, err
	}
	if nd == d.local {
		return localTail(path, n)
	}
	lt, ok := nd.(node.LogTailer)
	if !ok {
		done(nil)
		return node.LogTail{}, fmt.Errorf("replica %s: its node cannot read logs: %w", id, errdefs.ErrUnavailable)
	}
	r := relocate(node.ReplicaSpec{Log: path}, d.dir).Log
	t, err := lt.TailLog(ctx, id, r, n)
	done(err)
	if err != nil {
		return t, fmt.Errorf("replica %s on node %s: log: %w", id, d.Where(id), err)
	}
	return t, nil
}

// localTail reads the end of the log at path on this host.
func localTail(path string, n int) (node.LogTail, error) {
	fi, err := os.Stat(path)
	if err != nil {
		return node.LogTail{}, err
	}
	t := node.LogTail{Mod: fi.ModTime()}
	t.Lines, t.Cursor, err = node.TailLogAt(path, n)
	return t, err
}

// FollowLog reads what replica id's log gained since c: from this host's
// file at path, or from the node the replica is on.
func (d *Dispatcher) FollowLog(ctx context.Context, id, path string, c node.LogCursor) (node.LogTail, error) {
	nd, ctx, done, err := d.to(ctx, id)
	if err != nil {
		return node.LogTail{}, err
	}
	if nd == d.local {
		var t node.LogTail
		t.Lines, t.Cursor, err = node.ReadLogFrom(path, c)
		return t, err
	}
	lf, ok := nd.(node.LogFollower)
	if !ok {
		done(nil)
		return node.LogTail{}, fmt.Errorf("replica %s: its node cannot follow logs: %w", id, errdefs.ErrUnavailable)
	}
	t, err := lf.FollowLog(ctx, id, relocate(node.ReplicaSpec{Log: path}, d.dir).Log, c)
	done(err)
	if err != nil {
		return t, fmt.Errorf("replica %s on node %s: log: %w", id, d.Where(id), err)
	}
	return t, nil
}
