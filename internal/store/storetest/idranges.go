package storetest

import (
	"errors"
	"fmt"
	"sync"
	"testing"

	"github.com/shoal-run/shoal/internal/errdefs"
	"github.com/shoal-run/shoal/internal/store"
)

// testIDRangeClaims: an app keeps its range from claim to claim, two apps
// never share one, a released range is claimed again, and a full table is
// refused.
func (s *suite) testIDRangeClaims(t *testing.T, st store.Store) {
	claim := func(app string, max int) int {
		t.Helper()
		i, err := store.ClaimIDRange(ctx(t), st, app, max)
		if err != nil {
			t.Fatalf("claim for %s: %v", app, err)
		}
		return i
	}
	if _, err := store.IDRangeOf(ctx(t), st, "a"); !errdefs.IsNotFound(err) {
		t.Fatalf("range of an app with none: got %v, want not found", err)
	}
	a, b := claim("a", 4), claim("b", 4)
	if a != 0 || b != 1 {
		t.Fatalf("first claims: a=%d b=%d, want 0 and 1", a, b)
	}
	if again := claim("a", 4); again != a {
		t.Fatalf("a claimed again: got %d, want its range %d", again, a)
	}
	if got, err := store.IDRangeOf(ctx(t), st, "b"); err != nil || got != b {
		t.Fatalf("range of b: got %d, %v; want %d", got, err, b)
	}
	if err := store.ReleaseIDRange(ctx(t), st, "a"); err != nil {
		t.Fatalf("release a: %v", err)
	}
	if err := store.ReleaseIDRange(ctx(t), st, "a"); err != nil {
		t.Fatalf("release a twice: %v", err)
	}
	if _, err := store.IDRangeOf(ctx(t), st, "a"); !errdefs.IsNotFound(err) {
		t.Fatalf("range of released a: got %v, want not found", err)
	}
	if c := claim("c", 4); c != 0 {
		t.Fatalf("claim after a's release: got %d, want the freed 0", c)
	}
	claim("d", 4)
	claim("e", 4)
	if _, err := store.ClaimIDRange(ctx(t), st, "f", 4); !errors.Is(err, errdefs.ErrUnavailable) {
		t.Fatalf("claim with every range taken: got %v, want unavailable", err)
	}
	if _, err := store.ClaimIDRange(ctx(t), st, "", 4); !errdefs.IsInvalid(err) {
		t.Fatalf("claim for no app: got %v, want invalid", err)
	}
}

// testIDRangeConcurrent: apps claiming at once get distinct ranges, and
// callers claiming for one app at once agree on its range.
func (s *suite) testIDRangeConcurrent(t *testing.T, st store.Store) {
	const apps, callers = 6, 3
	got := make([][]int, apps)
	var wg sync.WaitGroup
	var mu sync.Mutex
	errs := []error{}
	for a := 0; a < apps; a++ {
		got[a] = make([]int, callers)
		for c := 0; c < callers; c++ {
			wg.Add(1)
			go func(a, c int) {
				defer wg.Done()
				i, err := store.ClaimIDRange(ctx(t), st, fmt.Sprintf("app%d", a), 100)
				if err != nil {
					mu.Lock()
					errs = append(errs, err)
					mu.Unlock()
				}
				got[a][c] = i
			}(a, c)
		}
	}
	wg.Wait()
	if len(errs) > 0 {
		t.Fatalf("claims: %v", errs)
	}
	owner := map[int]int{}
	for a := range got {
		for c := range got[a] {
			if got[a][c] != got[a][0] {
				t.Fatalf("app%d: callers got ranges %v, want one", a, got[a])
			}
		}
		if o, ok := owner[got[a][0]]; ok {
			t.Fatalf("range %d held by app%d and app%d", got[a][0], o, a)
		}
		owner[got[a][0]] = a
		if i, err := store.IDRangeOf(ctx(t), st, fmt.Sprintf("app%d", a)); err != nil || i != got[a][0] {
			t.Fatalf("app%d: range %d, %v after the claims; callers got %d", a, i, err, got[a][0])
		}
	}
}
