package store

import (
	"context"
	"fmt"

	"github.com/shoal-run/shoal/internal/errdefs"
)

// DomainOwnedError refuses a claim of a domain another app owns; it is an
// errdefs.ErrConflict.
type DomainOwnedError struct{ Domain, Owner string }

func (e *DomainOwnedError) Error() string {
	return fmt.Sprintf("domain %s belongs to app %q", e.Domain, e.Owner)
}

// Is makes the error an errdefs.ErrConflict.
func (e *DomainOwnedError) Is(target error) bool { return target == errdefs.ErrConflict }

// ClaimDomains makes app the owner of each of domains (DomainKey), with
// create-only writes: of two apps that claim one domain at once, one wins
// and the other gets a *DomainOwnedError naming the owner, and gives back
// what it claimed in this call. Domains app owns already stay its own.
// It returns the domains this call claimed.
func ClaimDomains(ctx context.Context, s Store, app string, domains []string) ([]string, error) {
	var claimed []string
	undo := func() {
		for _, d := range claimed {
			s.Delete(context.WithoutCancel(ctx), DomainKey(d))
		}
	}
	for _, d := range domains {
		_, err := s.CompareAndSwap(ctx, DomainKey(d), 0, []byte(app))
		if err == nil {
			claimed = append(claimed, d)
			continue
		}
		if !errdefs.IsConflict(err) {
			undo()
			return nil, fmt.Errorf("domain %s: %w", d, err)
		}
		kv, gerr := s.Get(ctx, DomainKey(d))
		switch {
		case gerr == nil && string(kv.Value) == app:
			continue
		case gerr == nil:
			undo()
			return nil, &DomainOwnedError{Domain: d, Owner: string(kv.Value)}
		default:
			undo()
			return nil, fmt.Errorf("domain %s: %w", d, gerr)
		}
	}
	return claimed, nil
}

// ReleaseClaimed gives back domains claimed for app (those a deploy that
// failed claimed). A claim is only ever written while its key is absent,
// so one that names app stays app's until deleted.
func ReleaseClaimed(ctx context.Context, s Store, app string, domains []string) {
	for _, d := range domains {
		if kv, err := s.Get(ctx, DomainKey(d)); err == nil && string(kv.Value) == app {
			s.Delete(ctx, DomainKey(d))
		}
	}
}

// ReleaseDomains gives back the domains app owns that are not in keep.
func ReleaseDomains(ctx context.Context, s Store, app string, keep []string) error {
	kvs, err := s.List(ctx, DomainsPrefix)
	if err != nil {
		return fmt.Errorf("domains of %q: %w", app, err)
	}
	kept := make(map[string]bool, len(keep))
	for _, d := range keep {
		kept[d] = true
	}
	for _, kv := range kvs {
		d := kv.Key[len(DomainsPrefix):]
		if string(kv.Value) != app || kept[d] {
			continue
		}
		if err := s.Delete(ctx, kv.Key); err != nil && !errdefs.IsNotFound(err) {
			return fmt.Errorf("domain %s of %q: %w", d, app, err)
		}
	}
	return nil
}
