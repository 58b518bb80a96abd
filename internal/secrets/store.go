package secrets

import (
	"context"
	"encoding/json"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/shoal-run/shoal/internal/api/types"
	"github.com/shoal-run/shoal/internal/clock"
	"github.com/shoal-run/shoal/internal/errdefs"
	"github.com/shoal-run/shoal/internal/manifest"
	"github.com/shoal-run/shoal/internal/store"
)

// MaxValue bounds a secret's value (the API's, which the CLI reads up to).
const MaxValue = types.MaxSecretValue

// Info is what may be shown of a secret: never its value.
type Info struct {
	Name    string
	Updated time.Time
	Size    int
}

// record is a secret in the store.
type record struct {
	Sealed
	Updated time.Time `json:"updated"`
	Size    int       `json:"size"`
}

// Store keeps apps' secrets sealed under store.SecretsPrefix.
type Store struct {
	st    store.Store
	key   *Key
	clock clock.Clock
}

// New returns the secrets of st, sealed with key.
func New(st store.Store, key *Key, c clock.Clock) *Store {
	if c == nil {
		c = clock.Real{}
	}
	return &Store{st: st, key: key, clock: c}
}

func check(app, name string) error {
	if !manifest.IsDNSLabel(app) {
		return errdefs.Invalid("app", "%q is not an app name", app)
	}
	return manifest.CheckSecretName(name)
}

// Set seals value as app's secret name, replacing any earlier one. The
// app need not be deployed yet.
func (s *Store) Set(ctx context.Context, app, name string, value []byte) (Info, error) {
	if err := check(app, name); err != nil {
		return Info{}, err
	}
	if len(value) > MaxValue {
		return Info{}, errdefs.Invalid("value", "%d bytes; a secret holds at most %d", len(value), MaxValue)
	}
	if _, err := s.st.Get(ctx, store.SecretKey(app, name)); errdefs.IsNotFound(err) {
		have, err := s.st.List(ctx, store.SecretsPrefix(app))
		if err != nil {
			return Info{}, fmt.Errorf("app %q: secrets: %w", app, err)
		}
		if len(have) >= manifest.MaxSecrets {
			return Info{}, errdefs.Invalid("name", "app %q has %d secrets, the most it may have", app, len(have))
		}
	} else if err != nil {
		return Info{}, fmt.Errorf("app %q: secret %q: %w", app, name, err)
	}
	sealed, err := s.key.Seal(app, name, value)
	if err != nil {
		return Info{}, err
	}
	r := record{Sealed: sealed, Updated: s.clock.Now().UTC(), Size: len(value)}
	b, err := json.Marshal(r)
	if err != nil {
		return Info{}, err
	}
	if _, err := s.st.Put(ctx, store.SecretKey(app, name), b); err != nil {
		return Info{}, fmt.Errorf("app %q: secret %q: %w", app, name, err)
	}
	return Info{Name: name, Updated: r.Updated, Size: r.Size}, nil
}

// List gives app's secrets by name: names, update times and sizes.
func (s *Store) List(ctx context.Context, app string) ([]Info, error) {
	if !manifest.IsDNSLabel(app) {
		return nil, errdefs.Invalid("app", "%q is not an app name", app)
	}
	kvs, err := s.st.List(ctx, store.SecretsPrefix(app))
	if err != nil {
		return nil, fmt.Errorf("app %q: secrets: %w", app, err)
	}
	out := make([]Info, 0, len(kvs))
	for _, kv := range kvs {
		var r record
		if err := json.Unmarshal(kv.Value, &r); err != nil {
			return nil, fmt.Errorf("app %q: secret record %s: %w", app, kv.Key, err)
		}
		out = append(out, Info{Name: strings.TrimPrefix(kv.Key, store.SecretsPrefix(app)), Updated: r.Updated, Size: r.Size})
	}
	slices.SortFunc(out, func(a, b Info) int { return strings.Compare(a.Name, b.Name) })
	return out, nil
}

// Delete removes app's secret name (not found when there is none).
func (s *Store) Delete(ctx context.Context, app, name string) error {
	if err := check(app, name); err != nil {
		return err
	}
	k := store.SecretKey(app, name)
	if _, err := s.st.Get(ctx, k); err != nil {
		return fmt.Errorf("app %q: secret %q: %w", app, name, err)
	}
	if err := s.st.Delete(ctx, k); err != nil {
		return fmt.Errorf("app %q: secret %q: %w", app, name, err)
	}
	return nil
}

// DeleteApp removes every secret of app.
func (s *Store) DeleteApp(ctx context.Context, app string) error {
	kvs, err := s.st.List(ctx, store.SecretsPrefix(app))
	if err != nil {
		return fmt.Errorf("app %q: secrets: %w", app, err)
	}
	for _, kv := range kvs {
		if err := s.st.Delete(ctx, kv.Key); err != nil && !errdefs.IsNotFound(err) {
			return fmt.Errorf("app %q: secrets: %w", app, err)
		}
	}
	return nil
}

// Open gives the values of app's secrets names; a name that is not set
// is an error saying how to set it.
func (s *Store) Open(ctx context.Context, app string, names []string) (map[string][]byte, error) {
	out := make(map[string][]byte, len(names))
	for _, name := range names {
		kv, err := s.st.Get(ctx, store.SecretKey(app, name))
		if errdefs.IsNotFound(err) {
			return nil, fmt.Errorf("secret %q of app %q is not set (shoal secret set %s %s < FILE): %w", name, app, app, name, errdefs.ErrNotFound)
		}
		if err != nil {
			return nil, fmt.Errorf("app %q: secret %q: %w", app, name, err)
		}
		var r record
		if err := json.Unmarshal(kv.Value, &r); err != nil {
			return nil, fmt.Errorf("app %q: secret record %q: %w", app, name, err)
		}
		v, err := s.key.Open(app, name, r.Sealed)
		if err != nil {
			return nil, err
		}
		out[name] = v
	}
	return out, nil
}
