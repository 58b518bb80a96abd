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

// errNoCertsKey is why a node of a cluster whose only key for
// certificates would come from the store refuses to seal one.
var errNoCertsKey = refusal("in a cluster, certificate keys need a key kept outside etcd: give every node --cluster-token-file (or the same --secrets-key-file)")

// refusal is an error that cannot be worked around by the request: the
// daemon must be started otherwise.
type refusal string

func (r refusal) Error() string        { return string(r) }
func (r refusal) Is(target error) bool { return target == errdefs.ErrUnavailable }

// openSecrets loads the secrets key (--secrets-key-file, else
// <data-dir>/secrets.key, made on first use) and opens apps' secrets and
// the proxy's certificates, whose keys it seals too (certsKey).
func (d *Daemon) openSecrets(ctx context.Context) error {
	path := d.cfg.SecretsKeyFile
	if path == "" {
		path = filepath.Join(d.cfg.DataDir, "secrets.key")
	}
	key, err := secrets.LoadKey(path)
	if err != nil {
		return err
	}
	_, inCluster := d.store.(*store.Etcd)
	ck, err := certsKey(ctx, d.store, inCluster, d.cfg.SecretsKeyFile, d.cfg.ClusterTokenFile, key)
	if err != nil {
		return err
	}
	d.certsKey = ck
	if why := ck.CanSeal(); why != nil {
		d.notes = append(d.notes, "certificates cannot be added or ordered: "+why.Error())
		d.log.Warn("certificates cannot be added or ordered", "reason", why)
	}
	d.secrets = secrets.New(d.store, key, clock.Real{})
	d.certs = certs.New(d.store, d.certsKey, clock.Real{})
	return nil
}

// certsKey returns the key that seals certificates' keys (and the ACME
// account's), which every node's proxy opens. On one host, or with
// --secrets-key-file (keyFile, the same on every node), it is own. In a
// cluster without one, each node's own file differs: the key is derived
// from the cluster secret of --cluster-token-file (tokenFile), kept off
// the store. Without that file the only shared secret is the one in the
// store, beside the records it would seal: the key then opens what was
// sealed before (with own or that secret) but refuses to seal
// (errNoCertsKey). A key derived from a secret left in the store also
// opens, so records sealed before --cluster-token-file stay readable.
func certsKey(ctx context.Context, st store.Store, inCluster bool, keyFile, tokenFile string, own *secrets.Key) (*secrets.Key, error) {
	if !inCluster || keyFile != "" {
		return own, nil
	}
	var stored *secrets.Key
	if kv, err := st.Get(ctx, store.ClusterSecretKey); err == nil {
		if s := strings.TrimSpace(string(kv.Value)); len(s) >= 16 {
			if stored, err = secrets.DeriveKey(s, certsKeyLabel, "(the cluster secret kept in the store)"); err != nil {
				return nil, err
			}
		}
	} else if !errdefs.IsNotFound(err) {
		return nil, fmt.Errorf("certificates' key: cluster secret: %w", err)
	}
	if tokenFile == "" {
		if stored == nil {
			return own.OpenOnly(errNoCertsKey), nil
		}
		return stored.WithOlder(own).OpenOnly(errNoCertsKey), nil
	}
	secret, err := cluster.Secret(ctx, st, tokenFile)
	if err != nil {
		return nil, fmt.Errorf("certificates' key: %w", err)
	}
	ck, err := secrets.DeriveKey(secret, certsKeyLabel, "(the cluster secret's, --cluster-token-file)")
	if err != nil {
		return nil, err
	}
	return ck.WithOlder(own, stored), nil
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
