package serving

import (
	"context"
	"errors"
	"fmt"
	"os"
	"time"

	"github.com/shoal-run/shoal/internal/errdefs"
)

// tailLog reads the last n lines of replica id's log, whose path on this
// host is path: from this host's file, or, for a replica placed on another
// node, from that node through its TailLog. A node that does not answer
// is an error, as is one whose Node cannot read logs.
func (d *dispatcher) tailLog(ctx context.Context, id, path string, n int) (LogTail, error) {
	node, ctx, done, err := d.to(ctx, id)
	if err != nil {
		return LogTail{}, err
	}
	if node == d.local {
		return localTail(path, n)
	}
	lt, ok := node.(LogTailer)
	if !ok {
		done(nil)
		return LogTail{}, fmt.Errorf("replica %s: its node cannot read logs: %w", id, errdefs.ErrUnavailable)
	}
	r := relocate(ReplicaSpec{Log: path}, d.dir).Log
	t, err := lt.TailLog(ctx, id, r, n)
	done(err)
	if err != nil {
		return t, fmt.Errorf("replica %s on node %s: log: %w", id, d.nodeOf(id), err)
	}
	return t, nil
}

// localTail reads the end of the log at path on this host.
func localTail(path string, n int) (LogTail, error) {
	fi, err := os.Stat(path)
	if err != nil {
		return LogTail{}, err
	}
	return LogTail{Lines: tailLog(path, n), Mod: fi.ModTime()}, nil
}

// remoteTailLimit bounds a read of a replica's log on another node.
const remoteTailLimit = 5 * time.Second

// replicaTail reads the last n lines of replica id's log wherever it runs;
// what cannot be read is nil.
func (d *driver) replicaTail(id string, n int) []string {
	if d.m.disp == nil {
		return tailLog(d.logs.path(id), n)
	}
	ctx, cancel := context.WithTimeout(context.Background(), remoteTailLimit)
	defer cancel()
	t, err := d.m.disp.tailLog(ctx, id, d.logs.path(id), n)
	if err != nil {
		if !errors.Is(err, os.ErrNotExist) {
			d.m.log.Warn("serving: replica log", "app", d.name, "replica", id, "err", err)
		}
		return nil
	}
	return t.Lines
}
