package store

import (
	"context"
	"fmt"

	"github.com/shoal-run/shoal/internal/errdefs"
)

// IDRangesPrefix holds the claims of host id ranges: the key of range i
// (IDRangeKey) names the app that holds it. Each app's replicas run in a
// user namespace mapped onto its range (see internal/userns); the claim
// lives as long as the app, so its files keep their owner across daemon
// restarts and on every node of a cluster.
const IDRangesPrefix = Root + "idranges/"

// IDRangeKey is the key of the claim of range i.
func IDRangeKey(i int) string { return IDRangesPrefix + pad(int64(i)) }

// IDRangeOf returns the index of the range app holds: the lowest one that
// names it. errdefs.ErrNotFound when it holds none.
func IDRangeOf(ctx context.Context, s Store, app string) (int, error) {
	kvs, err := s.List(ctx, IDRangesPrefix)
	if err != nil {
		return 0, fmt.Errorf("id range of %q: %w", app, err)
	}
	for _, kv := range kvs {
		if string(kv.Value) == app {
			return rangeIndex(kv.Key)
		}
	}
	return 0, fmt.Errorf("id range of %q: %w", app, errdefs.ErrNotFound)
}

// ClaimIDRange returns the range app holds, claiming the lowest free one
// below max when it holds none. Claims are create-only writes, so two
// apps never hold one range; an app that two callers claim for at once may
// get two, and both callers then keep the lowest and give back the other.
// errdefs.ErrUnavailable (wrapped) when every range below max is taken.
func ClaimIDRange(ctx context.Context, s Store, app string, max int) (int, error) {
	if app == "" {
		return 0, errdefs.Invalid("app", "an app name is needed for an id range")
	}
	for attempt := 0; ; attempt++ {
		kvs, err := s.List(ctx, IDRangesPrefix)
		if err != nil {
			return 0, fmt.Errorf("id range of %q: %w", app, err)
		}
		used := make(map[int]bool, len(kvs))
		for _, kv := range kvs {
			i, err := rangeIndex(kv.Key)
			if err != nil {
				continue
			}
			if string(kv.Value) == app {
				return i, nil
			}
			used[i] = true
		}
		free := -1
		for i := 0; i < max; i++ {
			if !used[i] {
				free = i
				break
			}
		}
		if free < 0 {
			return 0, fmt.Errorf("id range of %q: all %d ranges are taken: %w", app, max, errdefs.ErrUnavailable)
		}
		if _, err := s.CompareAndSwap(ctx, IDRangeKey(free), 0, []byte(app)); err != nil {
			if errdefs.IsConflict(err) && attempt < 1000 {
				continue // taken since the list: look again
			}
			return 0, fmt.Errorf("id range of %q: %w", app, err)
		}
		// Another caller may have claimed one for app at the same time:
		// the lowest wins.
		got, err := IDRangeOf(ctx, s, app)
		if err != nil {
			return 0, err
		}
		if got != free {
			_ = deleteClaim(ctx, s, free, app)
		}
		return got, nil
	}
}

// ReleaseIDRange gives back every range app holds. Releasing none is no
// error.
func ReleaseIDRange(ctx context.Context, s Store, app string) error {
	kvs, err := s.List(ctx, IDRangesPrefix)
	if err != nil {
		return fmt.Errorf("id range of %q: %w", app, err)
	}
	for _, kv := range kvs {
		if string(kv.Value) != app {
			continue
		}
		i, err := rangeIndex(kv.Key)
		if err != nil {
			continue
		}
		if err := deleteClaim(ctx, s, i, app); err != nil {
			return err
		}
	}
	return nil
}

// deleteClaim deletes the claim of range i if app still holds it.
func deleteClaim(ctx context.Context, s Store, i int, app string) error {
	kv, err := s.Get(ctx, IDRangeKey(i))
	if errdefs.IsNotFound(err) || (err == nil && string(kv.Value) != app) {
		return nil
	}
	if err != nil {
		return fmt.Errorf("id range %d of %q: %w", i, app, err)
	}
	if err := s.Delete(ctx, IDRangeKey(i)); err != nil && !errdefs.IsNotFound(err) {
		return fmt.Errorf("id range %d of %q: %w", i, app, err)
	}
	return nil
}

func rangeIndex(key string) (int, error) {
	n, err := ParseSeq(key)
	if err != nil {
		return 0, err
	}
	if n < 0 || n > 1<<31 {
		return 0, fmt.Errorf("key %q: range %d out of bounds: %w", key, n, errdefs.ErrInvalid)
	}
	return int(n), nil
}
