package daemon

import (
	"context"
	"path/filepath"

	"github.com/shoal-run/shoal/internal/api"
	"github.com/shoal-run/shoal/internal/serving"
	"github.com/shoal-run/shoal/internal/volume"
)

// volumesAPI is `shoal volume` on this node: the volumes under its data
// dir, told kept or in use by the apps the store has (in a cluster, each
// node answers for its own).
func (d *Daemon) volumesAPI() api.Volumes {
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
