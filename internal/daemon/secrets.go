package daemon

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/shoal-run/shoal/internal/api"
	"github.com/shoal-run/shoal/internal/api/types"
	"github.com/shoal-run/shoal/internal/certs"
	"github.com/shoal-run/shoal/internal/clock"
	"github.com/shoal-run/shoal/internal/cluster"
	"github.com/shoal-run/shoal/internal/errdefs"
	"github.com/shoal-run/shoal/internal/localnode"
	"github.com/shoal-run/shoal/internal/manifest"
	"github.com/shoal-run/shoal/internal/runtime"
	"github.com/shoal-run/shoal/internal/secrets"
	"github.com/shoal-run/shoal/internal/store"
)

// certsKeyLabel binds the key derived from the cluster secret to
// certificates' keys.
const certsKeyLabel = "shoal certificate keys"

// openSecrets loads the secrets key (--secrets-key-file, else
// <data-dir>/secrets.key, made on first use) and opens apps' secrets and
// the proxy's certificates, whose keys it seals too. In a cluster given
// no --secrets-key-file, each node's own file differs: certificates' keys
// (and the ACME account's), which every node's proxy opens, are sealed
// with a key derived from the cluster secret instead (what this node
// sealed with its own file still opens).
func (d *Daemon) openSecrets(ctx context.Context) error {
	path := d.cfg.SecretsKeyFile
	if path == "" {
		path = filepath.Join(d.cfg.DataDir, "secrets.key")
	}
	key, err := secrets.LoadKey(path)
	if err != nil {
		return err
	}
	d.certsKey = key
	if _, ok := d.store.(*store.Etcd); ok && d.cfg.SecretsKeyFile == "" {
		secret, err := cluster.Secret(ctx, d.store, d.cfg.ClusterTokenFile)
		if err != nil {
			return fmt.Errorf("certificates' key: %w", err)
		}
		ck, err := secrets.DeriveKey(secret, certsKeyLabel, "(the cluster secret's)")
		if err != nil {
			return err
		}
		d.certsKey = ck.WithOlder(key)
	}
	d.secrets = secrets.New(d.store, key, clock.Real{})
	d.certs = certs.New(d.store, d.certsKey, clock.Real{})
	return nil
}

// secretsAPI is apps' secrets as the API serves them: never a value out.
type secretsAPI struct{ s *secrets.Store }

func wireSecret(i secrets.Info) types.Secret {
	return types.Secret{Name: i.Name, Updated: i.Updated, Size: i.Size}
}

func (a secretsAPI) List(ctx context.Context, app string) ([]types.Secret, error) {
	list, err := a.s.List(ctx, app)
	if err != nil {
		return nil, err
	}
	out := make([]types.Secret, len(list))
	for i, s := range list {
		out[i] = wireSecret(s)
	}
	return out, nil
}

func (a secretsAPI) Set(ctx context.Context, app, name string, value []byte) (types.Secret, error) {
	i, err := a.s.Set(ctx, app, name, value)
	return wireSecret(i), err
}

func (a secretsAPI) Delete(ctx context.Context, app, name string) error {
	return a.s.Delete(ctx, app, name)
}

// appsWithSecrets refuses a deploy whose [secrets] names one not set, and
// removes an app's secrets with the app.
type appsWithSecrets struct {
	api.Apps
	s *secrets.Store
}

func (a appsWithSecrets) Deploy(ctx context.Context, req types.DeployRequest) (types.App, error) {
	// A manifest that does not parse gets serving's own answer.
	if cfg, err := manifest.Parse([]byte(req.Manifest), "shoal.toml"); err == nil {
		if names := cfg.StoredSecrets(); len(names) > 0 {
			set, err := a.s.List(ctx, cfg.Name)
			if err != nil {
				return types.App{}, err
			}
			have := map[string]bool{}
			for _, i := range set {
				have[i.Name] = true
			}
			for _, n := range names {
				if !have[n] {
					return types.App{}, fmt.Errorf("shoal.toml: %w", errdefs.Invalid("secrets."+n,
						"is not set: shoal secret set %s %s < FILE (or -f FILE), then deploy again", cfg.Name, n))
				}
			}
		}
	}
	return a.Apps.Deploy(ctx, req)
}

// Activate passes the proxy's wake-up on to the apps: the API serves it
// only when its Apps can be woken.
func (a appsWithSecrets) Activate(app string) {
	if w, ok := a.Apps.(interface{ Activate(app string) }); ok {
		w.Activate(app)
	}
}

func (a appsWithSecrets) Remove(ctx context.Context, name string) error {
	if err := a.Apps.Remove(ctx, name); err != nil {
		return err
	}
	return a.s.DeleteApp(ctx, name)
}

// secretsDir is where localnode makes replicas' /run/secrets.
func (d *Daemon) secretsDir() string { return filepath.Join(d.cfg.RunDir, "secrets") }

// sweepSecrets removes the secrets of replicas whose container is gone
// (removed while no daemon ran): only adopted containers keep theirs.
func (d *Daemon) sweepSecrets(adopted []*runtime.Container) {
	keep := map[string]bool{}
	for _, c := range adopted {
		keep[c.ID] = true
	}
	entries, err := os.ReadDir(d.secretsDir())
	if err != nil {
		return
	}
	for _, e := range entries {
		if !keep[e.Name()] {
			if err := os.RemoveAll(filepath.Join(d.secretsDir(), e.Name())); err != nil {
				d.log.Warn("remove a gone replica's secrets", "replica", e.Name(), "err", err)
			}
		}
	}
}

// followSecrets keeps the secrets of this node's replicas current until
// ctx ends: each value set in the store is written into the running
// replicas of its app here (all of them again after each new watch).
func (d *Daemon) followSecrets(ctx context.Context, local *localnode.Node) {
	for ctx.Err() == nil {
		ch, err := d.store.Watch(ctx, store.SecretsRoot)
		if err == nil {
			if err := local.RefreshSecrets(ctx, "", ""); err != nil {
				d.log.Warn("refresh replicas' secrets", "err", err)
			}
			for ev := range ch {
				app, name, ok := strings.Cut(strings.TrimPrefix(ev.KV.Key, store.SecretsRoot), "/")
				if ev.Type != store.EventPut || !ok {
					continue
				}
				if err := local.RefreshSecrets(ctx, app, name); err != nil {
					d.log.Warn("refresh replicas' secrets", "app", app, "secret", name, "err", err)
				}
			}
		}
		select {
		case <-ctx.Done():
		case <-time.After(time.Second):
		}
	}
}
