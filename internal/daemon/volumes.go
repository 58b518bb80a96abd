package daemon

import (
	"context"
	"errors"
	"fmt"
	"path/filepath"

	"github.com/shoal-run/shoal/internal/api"
	"github.com/shoal-run/shoal/internal/cluster"
	"github.com/shoal-run/shoal/internal/errdefs"
	"github.com/shoal-run/shoal/internal/serving"
	"github.com/shoal-run/shoal/internal/volume"
)

// volumesAPI is `shoal volume` on this node: the volumes under its data
// dir, told kept or in use by the apps the store has (in a cluster, each
// node answers for its own, but an app's removal with its volumes removes
// them on every node).
func (d *Daemon) volumesAPI() api.Volumes {
	s := d.localVolumes()
	if s == nil {
		return nil
	}
	return clusterVolumes{Service: s, d: d}
}

// localVolumes is the volumes under this node's data dir (nil without apps).
func (d *Daemon) localVolumes() *volume.Service {
	if d.apps == nil {
		return nil
	}
	s := &volume.Service{
		Dir: filepath.Join(d.cfg.DataDir, "apps"),
		Apps: func(ctx context.Context) (map[string]map[string]string, error) {
			return serving.DeclaredVolumes(ctx, d.store)
		},
	}
	if c := d.confiner; c != nil {
		s.Range = func(ctx context.Context, app string) (uint32, error) {
			ns, err := c.Range(ctx, app)
			return ns.HostID, err
		}
	}
	return s
}

// clusterVolumes is this node's volumes, but for RemoveApp, which on a node
// of a cluster removes the app's volumes on every other node too, through
// its agent: a replica's volumes are on the node that ran it.
type clusterVolumes struct {
	*volume.Service
	d *Daemon
}

func (v clusterVolumes) RemoveApp(ctx context.Context, app string) error {
	if err := v.Service.RemoveApp(ctx, app); err != nil {
		return err
	}
	c := v.d.cluster
	if c == nil {
		return nil
	}
	nodes, err := cluster.List(ctx, v.d.store)
	if err != nil {
		return fmt.Errorf("volumes of app %s on the other nodes: %w", app, err)
	}
	var errs []error
	for _, n := range nodes {
		switch {
		case n.Name == v.d.cfg.Node:
		case n.State == cluster.StateDown:
			errs = append(errs, fmt.Errorf("node %s is down: its volumes of app %s are left (shoal volume rm there): %w", n.Name, app, errdefs.ErrUnavailable))
		default:
			if err := c.peers.RemoveAppVolumes(ctx, n.Name, app); err != nil {
				errs = append(errs, fmt.Errorf("volumes of app %s on node %s: %w", app, n.Name, err))
			}
		}
	}
	return errors.Join(errs...)
}
