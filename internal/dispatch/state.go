package dispatch

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"

	"github.com/shoal-run/shoal/internal/node"
)

// stateArea is the state area of replica id of app, relative to the apps
// folder, and the data directory in it that the replica mounts.
func stateArea(app, id string) (area, data string) {
	area = filepath.Join(app, "state", "live", id)
	return area, filepath.Join(area, "data")
}

// fetchState brings the state area of replica id of app, removed from
// node n (another node), into this host's live area of it, which the
// replica's start made here, so that retire merges it as any other; then
// the node drops its copy. Nothing is done for a replica without state.
func (d *Dispatcher) fetchState(ctx context.Context, n node.Node, app, id string) error {
	area, data := stateArea(app, id)
	dst := filepath.Join(d.dir, data)
	if _, err := os.Lstat(dst); err != nil {
		return nil
	}
	sc, ok := n.(node.StateCarrier)
	if !ok {
		return errors.New("the node cannot hand over state areas")
	}
	if err := sc.FetchState(ctx, id, data, dst); err != nil {
		return fmt.Errorf("fetch state: %w", err)
	}
	if err := sc.DropState(ctx, id, area); err != nil {
		d.log.Warn("dispatch: drop state on node", "replica", id, "err", err)
	}
	return nil
}
