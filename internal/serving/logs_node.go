package serving

import (
	"context"
	"errors"
	"os"
	"time"

	"github.com/shoal-run/shoal/internal/node"
)

// remoteTailLimit bounds a read of a replica's log on another node.
const remoteTailLimit = 5 * time.Second

// replicaTail reads the last n lines of replica id's log wherever it runs;
// what cannot be read is nil.
func (d *driver) replicaTail(id string, n int) []string {
	if d.m.disp == nil {
		return node.Texts(tailLog(d.logs.path(id), n))
	}
	ctx, cancel := context.WithTimeout(context.Background(), remoteTailLimit)
	defer cancel()
	t, err := d.m.disp.ReadLog(ctx, id, d.logs.path(id), n)
	if err != nil {
		if !errors.Is(err, os.ErrNotExist) {
			d.m.log.Warn("serving: replica log", "app", d.name, "replica", id, "err", err)
		}
		return nil
	}
	return node.Texts(t.Lines)
}
