package localnode

import (
	"context"
	"fmt"
	"path/filepath"

	"github.com/shoal-run/shoal/internal/manifest"
	"github.com/shoal-run/shoal/internal/node"
	"github.com/shoal-run/shoal/internal/runtime"
	"github.com/shoal-run/shoal/internal/volume"
)

// volumeOf names the app's volume that mount mt is, if it is one: its
// source is <apps>/<app>/volumes/<name> (a stateful app's ordinal n:
// <name>-<n>) and its destination the volume's path.
func volumeOf(cfg manifest.Config, mt node.Mount) (string, bool) {
	name := filepath.Base(mt.Source)
	if cfg.Stateful.Enabled() {
		if v, _, ok := manifest.SplitOrdinalVolume(name); ok {
			name = v
		}
	}
	if mt.Type != "" && mt.Type != "bind" || filepath.Base(filepath.Dir(mt.Source)) != "volumes" ||
		cfg.Volumes[name] == "" || cfg.Volumes[name] != mt.Destination {
		return "", false
	}
	return name, true
}

// prepareVolumes makes the volumes of replica s that are not on this host
// yet from its image (spec, before it is confined: its layers as
// unpacked), and gives each volume's root to its owner, in the app's user
// namespace when it has one.
func (n *Node) prepareVolumes(ctx context.Context, s node.ReplicaSpec, spec runtime.Spec) error {
	var vols []volume.Mount
	for _, mt := range s.Mounts {
		if name, ok := volumeOf(s.Config, mt); ok {
			vols = append(vols, volume.Mount{Dir: mt.Source, Path: mt.Destination, Owner: s.Config.Owner(name)})
		}
	}
	if len(vols) == 0 {
		return nil
	}
	var host uint32
	if n.confiner != nil {
		ns, err := n.confiner.Range(ctx, s.App)
		if err != nil {
			return fmt.Errorf("user namespace: %w", err)
		}
		host = ns.HostID
	}
	limit := s.Config.Resources.DiskBytes() // 0: the default
	if err := n.volumes.Prepare(ctx, vols, volume.Image{Layers: spec.Layers, User: spec.User}, host, limit); err != nil {
		return fmt.Errorf("app %q: %w", s.App, err)
	}
	return nil
}
