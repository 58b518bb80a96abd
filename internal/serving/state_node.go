package serving

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"

	"github.com/shoal-run/shoal/internal/statemerge"
)

// StateMax bounds the state area a replica on another node leaves: what
// the leader fetches to merge.
const StateMax int64 = 1 << 30

// StateCarrier is a Node that can hand over the state area of a replica
// it ran for another node: the leader fetches it to merge, then the node
// drops it. area is relative to the node's apps folder (see relocate).
type StateCarrier interface {
	// FetchState writes the regular files of the area into dst, an empty
	// directory of this host.
	FetchState(ctx context.Context, id, area, dst string) error
	// DropState removes the area.
	DropState(ctx context.Context, id, area string) error
}

// StateSource is what a node serves of the state areas of replicas it ran
// for another node.
type StateSource interface {
	// SendState writes the area's regular files to w as a tar.
	SendState(ctx context.Context, id, area string, w io.Writer) error
	// DropState removes the area.
	DropState(ctx context.Context, id, area string) error
}

// stateArea is the state area of replica id of app, relative to the apps
// folder, and the data directory in it that the replica mounts.
func stateArea(app, id string) (area, data string) {
	area = filepath.Join(app, "state", "live", id)
	return area, filepath.Join(area, "data")
}

// under is the relative path rel under the node's apps folder, or an error
// for a path that leaves it.
func (n *localNode) under(rel string) (string, error) {
	if !filepath.IsLocal(rel) || n.dir == "" {
		return "", fmt.Errorf("path %q is not under the apps folder", rel)
	}
	return filepath.Join(n.dir, rel), nil
}

// SendState writes the state area of a replica another node started here.
func (n *localNode) SendState(ctx context.Context, id, area string, w io.Writer) error {
	p, err := n.under(area)
	if err == nil {
		_, err = statemerge.WriteTar(p, w, StateMax)
	}
	if err != nil {
		return fmt.Errorf("replica %s: %w", id, err)
	}
	return nil
}

// DropState removes the state area of a replica another node started here.
func (n *localNode) DropState(ctx context.Context, id, area string) error {
	p, err := n.under(area)
	if err == nil {
		err = os.RemoveAll(p)
	}
	if err != nil {
		return fmt.Errorf("replica %s: state: %w", id, err)
	}
	return nil
}

// fetchState brings the state area of replica id of app, removed from
// node n (another node), into this host's live area of it, which the
// replica's start made here, so that retire merges it as any other; then
// the node drops its copy. Nothing is done for a replica without state.
func (d *dispatcher) fetchState(ctx context.Context, n Node, app, id string) error {
	area, data := stateArea(app, id)
	dst := filepath.Join(d.dir, data)
	if _, err := os.Lstat(dst); err != nil {
		return nil
	}
	sc, ok := n.(StateCarrier)
	if !ok {
		return errors.New("the node cannot hand over state areas")
	}
	if err := sc.FetchState(ctx, id, data, dst); err != nil {
		return fmt.Errorf("fetch state: %w", err)
	}
	if err := sc.DropState(ctx, id, area); err != nil {
		d.log.Warn("serving: drop state on node", "replica", id, "err", err)
	}
	return nil
}
