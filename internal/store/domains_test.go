package store_test

import (
	"context"
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
	if err := store.ClaimDomains(ctx, st, "web", []string{"a.test", "b.test"}); err != nil {
		t.Fatal(err)
	}
	// Claiming again is a no-op; another app is refused and keeps none.
	if err := store.ClaimDomains(ctx, st, "web", []string{"a.test"}); err != nil {
		t.Fatal(err)
	}
	err = store.ClaimDomains(ctx, st, "shop", []string{"c.test", "b.test"})
	if !errdefs.IsConflict(err) || !strings.Contains(err.Error(), `app "web"`) {
		t.Fatalf("b.test claimed by shop: %v", err)
	}
	if _, err := st.Get(ctx, store.DomainKey("c.test")); !errdefs.IsNotFound(err) {
		t.Fatalf("a refused claim left c.test: %v", err)
	}
	if err := store.ReleaseDomains(ctx, st, "web", []string{"a.test"}); err != nil {
		t.Fatal(err)
	}
	if err := store.ClaimDomains(ctx, st, "shop", []string{"b.test"}); err != nil {
		t.Fatalf("b.test after web let it go: %v", err)
	}
	// Of many apps claiming one domain at once, one wins.
	var wg sync.WaitGroup
	wins := make(chan string, 8)
	for i := range 8 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			app := fmt.Sprintf("app%d", i)
			if store.ClaimDomains(ctx, st, app, []string{"race.test"}) == nil {
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
