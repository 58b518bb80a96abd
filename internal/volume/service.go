package volume

import (
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path"
	"path/filepath"
	"slices"
	"strings"
	"syscall"

	"github.com/shoal-run/shoal/internal/api/types"
	"github.com/shoal-run/shoal/internal/errdefs"
	"github.com/shoal-run/shoal/internal/manifest"
	"github.com/shoal-run/shoal/internal/userns"
)

// Apps tells the volumes the apps of the cluster declare: app → volume
// name → path. An app being deleted is not in it.
type Apps func(ctx context.Context) (map[string]map[string]string, error)

// Service is `shoal volume` on this host: the volumes under Dir
// (<apps>/<app>/volumes/<name>).
type Service struct {
	Dir  string
	Apps Apps
	// Range is the first host id of app's user namespace (claimed if
	// need be); nil when apps run without one.
	Range func(ctx context.Context, app string) (uint32, error)
}

// List returns the volumes on this host, by app then name.
func (s *Service) List(ctx context.Context) ([]types.Volume, error) {
	apps, err := s.Apps(ctx)
	if err != nil {
		return nil, err
	}
	dirs, err := os.ReadDir(s.Dir)
	if err != nil && !errors.Is(err, fs.ErrNotExist) {
		return nil, fmt.Errorf("volumes: %w", err)
	}
	out := []types.Volume{}
	for _, a := range dirs {
		if !manifest.IsDNSLabel(a.Name()) {
			continue // not an app's folder (.checkpoints)
		}
		vols, err := os.ReadDir(filepath.Join(s.Dir, a.Name(), "volumes"))
		if err != nil {
			continue
		}
		for _, v := range vols {
			if !v.IsDir() || !manifest.IsDNSLabel(v.Name()) {
				continue // a volume being made, or not one
			}
			p := apps[a.Name()][v.Name()]
			vol := types.Volume{App: a.Name(), Name: v.Name(), Path: p, Kept: p == ""}
			vol.Bytes, vol.Files = usage(filepath.Join(s.Dir, a.Name(), "volumes", v.Name()))
			out = append(out, vol)
		}
	}
	slices.SortFunc(out, func(a, b types.Volume) int {
		return strings.Compare(a.App+"/"+a.Name, b.App+"/"+b.Name)
	})
	return out, nil
}

// usage is the bytes and files under dir, its links not followed.
func usage(dir string) (int64, int) {
	var n int64
	var files int
	filepath.WalkDir(dir, func(p string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() {
			return nil
		}
		files++
		if fi, err := d.Info(); err == nil {
			n += fi.Size()
		}
		return nil
	})
	return n, files
}

// dir is volume name of app's folder, which must be there.
func (s *Service) dir(app, name string) (string, error) {
	if !manifest.IsDNSLabel(app) {
		return "", errdefs.Invalid("app", "%q is not an app name", app)
	}
	if !manifest.IsDNSLabel(name) {
		return "", errdefs.Invalid("volume", "%q is not a volume name", name)
	}
	d := filepath.Join(s.Dir, app, "volumes", name)
	fi, err := os.Lstat(d)
	if errors.Is(err, fs.ErrNotExist) {
		return "", fmt.Errorf("volume %s of app %s is not on this node (shoal volume ls): %w", name, app, errdefs.ErrNotFound)
	}
	if err != nil {
		return "", fmt.Errorf("volume %s of app %s: %w", name, app, err)
	}
	if !fi.IsDir() {
		return "", fmt.Errorf("volume %s of app %s: not a directory", name, app)
	}
	return d, nil
}

// Remove deletes a volume no app uses.
func (s *Service) Remove(ctx context.Context, app, name string) error {
	d, err := s.dir(app, name)
	if err != nil {
		return err
	}
	apps, err := s.Apps(ctx)
	if err != nil {
		return err
	}
	if p := apps[app][name]; p != "" {
		return fmt.Errorf("volume %s is app %s's, mounted at %s: remove the app first (shoal app rm %s --volumes removes its volumes with it): %w",
			name, app, p, app, errdefs.ErrConflict)
	}
	return removeVolume(d)
}

// Prune deletes the volumes of app, which is deployed, that it does not
// use: a stateful app's copies of the ordinals it no longer runs, and the
// volumes an earlier revision declared. It returns their names.
func (s *Service) Prune(ctx context.Context, app string) ([]string, error) {
	if !manifest.IsDNSLabel(app) {
		return nil, errdefs.Invalid("app", "%q is not an app name", app)
	}
	apps, err := s.Apps(ctx)
	if err != nil {
		return nil, err
	}
	used, ok := apps[app]
	if !ok {
		return nil, fmt.Errorf("app %s is not deployed (shoal volume rm removes a removed app's volumes): %w", app, errdefs.ErrNotFound)
	}
	dir := filepath.Join(s.Dir, app, "volumes")
	ents, err := os.ReadDir(dir)
	if err != nil && !errors.Is(err, fs.ErrNotExist) {
		return nil, fmt.Errorf("volumes of app %s: %w", app, err)
	}
	pruned := []string{}
	for _, e := range ents {
		if !e.IsDir() || !manifest.IsDNSLabel(e.Name()) || used[e.Name()] != "" {
			continue
		}
		if err := removeVolume(filepath.Join(dir, e.Name())); err != nil {
			return pruned, fmt.Errorf("volume %s of app %s: %w", e.Name(), app, err)
		}
		pruned = append(pruned, e.Name())
	}
	return pruned, nil
}

// RemoveApp deletes every volume of app, which is gone.
func (s *Service) RemoveApp(ctx context.Context, app string) error {
	if !manifest.IsDNSLabel(app) {
		return errdefs.Invalid("app", "%q is not an app name", app)
	}
	dir := filepath.Join(s.Dir, app, "volumes")
	if err := os.RemoveAll(dir); err != nil {
		return fmt.Errorf("volumes of app %s: %w", app, err)
	}
	os.Remove(filepath.Join(s.Dir, app)) // the app's folder, if nothing else is left
	return nil
}

// removeVolume removes volume folder d: renamed out of the way first, so
// a failure half-way leaves no half volume under its name.
func removeVolume(d string) error {
	gone := tempName(d, "removed")
	if err := os.Rename(d, gone); err != nil {
		return fmt.Errorf("volume %s: %w", filepath.Base(d), err)
	}
	if err := os.RemoveAll(gone); err != nil {
		return fmt.Errorf("volume %s: %w", filepath.Base(d), err)
	}
	vols := filepath.Dir(d)
	if os.Remove(vols) == nil {
		os.Remove(filepath.Dir(vols))
	}
	return nil
}

// rel is path p in a volume as a name relative to its root ("." for the
// root), or an error naming it.
func rel(p string) (string, error) {
	if p == "" {
		p = "/"
	}
	if !strings.HasPrefix(p, "/") || strings.ContainsRune(p, 0) {
		return "", errdefs.Invalid("path", "%q must be an absolute path in the volume", p)
	}
	if c := path.Clean(p); c != "/" {
		return strings.TrimPrefix(c, "/"), nil
	}
	return ".", nil
}

// Stat says what path p of a volume is.
func (s *Service) Stat(ctx context.Context, app, name, p string) (types.VolumePathStat, error) {
	d, err := s.dir(app, name)
	if err != nil {
		return types.VolumePathStat{}, err
	}
	r, err := rel(p)
	if err != nil {
		return types.VolumePathStat{}, err
	}
	root, err := os.OpenRoot(d)
	if err != nil {
		return types.VolumePathStat{}, err
	}
	defer root.Close()
	fi, err := root.Stat(r)
	if errors.Is(err, fs.ErrNotExist) {
		return types.VolumePathStat{}, nil
	}
	if err != nil {
		return types.VolumePathStat{}, fmt.Errorf("volume %s: %s: %w", name, p, err)
	}
	uid, gid := statOf(fi)
	return types.VolumePathStat{Exists: true, Dir: fi.IsDir(), UID: int(userns.Unshift(uid)), GID: int(userns.Unshift(gid))}, nil
}

// Export writes path p of a volume (its root for "/") as a tar to w: its
// entries are named from p's base name ("." and below for the root), the
// owners as the app's container sees them.
func (s *Service) Export(ctx context.Context, app, name, p string, w io.Writer) error {
	d, err := s.dir(app, name)
	if err != nil {
		return err
	}
	r, err := rel(p)
	if err != nil {
		return err
	}
	root, err := os.OpenRoot(d)
	if err != nil {
		return err
	}
	defer root.Close()
	if _, err := root.Lstat(r); errors.Is(err, fs.ErrNotExist) {
		return fmt.Errorf("volume %s of app %s has no %s: %w", name, app, p, errdefs.ErrNotFound)
	} else if err != nil {
		return err
	}
	return writeTar(ctx, root, r, w)
}

// Import reads a tar from rd into directory p of a volume (made if it is
// the root of a volume the app declares). The whole archive is unpacked
// beside the volume first: a bad archive, or one whose files hold more
// than limit bytes (0: DefaultMaxBytes), changes nothing.
func (s *Service) Import(ctx context.Context, app, name, p string, rd io.Reader, limit int64) error {
	r, err := rel(p)
	if err != nil {
		return err
	}
	d, err := s.dir(app, name)
	if errdefs.IsNotFound(err) && r == "." {
		d, err = s.create(ctx, app, name)
	}
	if err != nil {
		return err
	}
	root, err := os.OpenRoot(d)
	if err != nil {
		return err
	}
	defer root.Close()
	fi, err := root.Stat(r)
	if errors.Is(err, fs.ErrNotExist) {
		return fmt.Errorf("volume %s of app %s has no directory %s: %w", name, app, p, errdefs.ErrNotFound)
	}
	if err != nil {
		return err
	}
	if !fi.IsDir() {
		return errdefs.Invalid("path", "%s in volume %s is not a directory", p, name)
	}
	top, err := os.Lstat(d)
	if err != nil {
		return err
	}
	uid, _ := statOf(top)
	host := rangeOf(uid)
	stage := tempName(d, "import")
	defer os.RemoveAll(stage)
	if err := readTar(ctx, rd, stage, host, limit); err != nil {
		return fmt.Errorf("volume %s of app %s: %w", name, app, err)
	}
	if err := mergeInto(stage, root, r); err != nil {
		return fmt.Errorf("volume %s of app %s: %w", name, app, err)
	}
	return nil
}

// create makes volume name of app, which the app declares, empty and the
// app's root's.
func (s *Service) create(ctx context.Context, app, name string) (string, error) {
	apps, err := s.Apps(ctx)
	if err != nil {
		return "", err
	}
	if apps[app][name] == "" {
		return "", fmt.Errorf("app %s declares no volume %s and none is on this node: %w", app, name, errdefs.ErrNotFound)
	}
	d := filepath.Join(s.Dir, app, "volumes", name)
	if err := os.MkdirAll(filepath.Dir(d), 0o755); err != nil {
		return "", err
	}
	var host uint32
	if s.Range != nil {
		if host, err = s.Range(ctx, app); err != nil {
			return "", err
		}
	}
	tmp := tempName(d, "new")
	if err := os.Mkdir(tmp, 0o755); err != nil {
		return "", err
	}
	if err := os.Lchown(tmp, int(host), int(host)); err != nil {
		os.Remove(tmp)
		return "", err
	}
	if err := os.Rename(tmp, d); err != nil {
		os.Remove(tmp)
		if _, serr := os.Lstat(d); serr != nil {
			return "", err
		}
	}
	return d, nil
}

// statOf is the owner of fi.
func statOf(fi fs.FileInfo) (uint32, uint32) {
	if st, ok := fi.Sys().(*syscall.Stat_t); ok {
		return st.Uid, st.Gid
	}
	return 0, 0
}

// rangeOf is the first host id of the app range host id id is in (the
// volume root's owner tells its app's), or 0 for none.
func rangeOf(id uint32) uint32 {
	if id < userns.Base {
		return 0
	}
	return id - userns.Unshift(id)
}
