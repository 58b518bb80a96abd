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
func (ctl *appCtl) replicaTail(id string, n int) []string {
	if ctl.m.disp == nil {
		return node.Texts(tailLog(ctl.logs.path(id), n))
	}
	ctx, cancel := context.WithTimeout(context.Background(), remoteTailLimit)
	defer cancel()
	t, err := ctl.m.disp.ReadLog(ctx, id, ctl.logs.path(id), n)
	if err != nil {
		if !errors.Is(err, os.ErrNotExist) {
			ctl.m.log.Warn("serving: replica log", "app", ctl.name, "replica", id, "err", err)
		}
		return nil
	}
	return node.Texts(t.Lines)
}
