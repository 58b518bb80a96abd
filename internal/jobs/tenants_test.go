package jobs

import (
	"context"
	"slices"
	"testing"

	"github.com/shoal-run/shoal/internal/api/types"
)

// Tenants counts each tenant's queued and running jobs, and forgets a
// tenant whose jobs have all ended.
func TestTenantsCountsQueuedAndRunning(t *testing.T) {
	r := newFakeRunner(true)
	m := openManager(t, Options{Store: openStore(t), Runner: r, Slots: 1})
	defer m.Close()
	js, err := m.Submit(context.Background(), []types.JobRequest{hello("b"), hello("a"), hello("b")})
	if err != nil {
		t.Fatal(err)
	}
	first := r.waitStart(t)
	want := []TenantStats{{Tenant: "a", Queued: 1}, {Tenant: "b", Queued: 1, Running: 1}}
	if got := m.Tenants(); !slices.Equal(got, want) {
		t.Fatalf("with one job running: %+v, want %+v", got, want)
	}
	if first != js[0].ID {
		t.Fatalf("first job to start: %s, want %s", first, js[0].ID)
	}
	for i := 0; i < len(js); i++ {
		if i > 0 {
			first = r.waitStart(t)
		}
		r.finish(first)
		if _, err := m.Wait(context.Background(), first); err != nil {
			t.Fatal(err)
		}
	}
	// A job is answered before its runner returns and frees the slot.
	waitFor(t, "no tenant with jobs once every job is done", func() bool { return len(m.Tenants()) == 0 })
}
