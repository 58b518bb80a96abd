package store_test

import (
	"context"
	"errors"
	"fmt"
	"path/filepath"
	"strings"
	"sync"
	"testing"

	"github.com/shoal-run/shoal/internal/errdefs"
	"github.com/shoal-run/shoal/internal/store"
)

func TestClaimDomains(t *testing.T) {
	st, err := store.OpenBolt(filepath.Join(t.TempDir(), "state.db"))
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	ctx := context.Background()
	if got, err := store.ClaimDomains(ctx, st, "web", []string{"a.test", "b.test"}); err != nil || len(got) != 2 {
		t.Fatal(err)
	}
	// Claiming again is a no-op; another app is refused and keeps none.
	if got, err := store.ClaimDomains(ctx, st, "web", []string{"a.test"}); err != nil || len(got) != 0 {
		t.Fatal(got, err)
	}
	_, err = store.ClaimDomains(ctx, st, "shop", []string{"c.test", "b.test"})
	var owned *store.DomainOwnedError
	if !errdefs.IsConflict(err) || !errors.As(err, &owned) || owned.Owner != "web" || owned.Domain != "b.test" || !strings.Contains(err.Error(), `app "web"`) {
		t.Fatalf("b.test claimed by shop: %v", err)
	}
	if _, err := st.Get(ctx, store.DomainKey("c.test")); !errdefs.IsNotFound(err) {
		t.Fatalf("a refused claim left c.test: %v", err)
	}
	if err := store.ReleaseDomains(ctx, st, "web", []string{"a.test"}); err != nil {
		t.Fatal(err)
	}
	got, err := store.ClaimDomains(ctx, st, "shop", []string{"b.test"})
	if err != nil {
		t.Fatalf("b.test after web let it go: %v", err)
	}
	store.ReleaseClaimed(ctx, st, "web", got) // not web's: kept
	store.ReleaseClaimed(ctx, st, "shop", got)
	if _, err := st.Get(ctx, store.DomainKey("b.test")); !errdefs.IsNotFound(err) {
		t.Fatalf("b.test after shop's claim was given back: %v", err)
	}
	// Of many apps claiming one domain at once, one wins.
	var wg sync.WaitGroup
	wins := make(chan string, 8)
	for i := range 8 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			app := fmt.Sprintf("app%d", i)
			if _, err := store.ClaimDomains(ctx, st, app, []string{"race.test"}); err == nil {
				wins <- app
			}
		}()
	}
	wg.Wait()
	close(wins)
	if n := len(wins); n != 1 {
		t.Fatalf("%d apps won race.test", n)
	}
}
