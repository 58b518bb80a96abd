package daemon

import (
	"context"
	"path/filepath"
	"testing"
	"time"

	"github.com/shoal-run/shoal/internal/api/types"
	"github.com/shoal-run/shoal/internal/clock"
	"github.com/shoal-run/shoal/internal/events"
	"github.com/shoal-run/shoal/internal/store"
)

// The event log reaches the API and serving through adapters: what serving
// emits comes back numbered, the API lists and watches it in its own type,
// and a watch ends when its context does.
func TestEventsAdapters(t *testing.T) {
	st, err := store.OpenBolt(filepath.Join(t.TempDir(), "store.db"))
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	l := events.New(st, clock.NewFake(time.Unix(1_000_000, 0)), 0)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	em := servingEvents{l}
	in := types.Event{Kind: "scale", App: "web", Reason: "busy", Inputs: map[string]float64{"in_flight": 2}}
	got, err := em.Emit(ctx, in)
	if err != nil || got.Seq != 1 || got.Time.IsZero() || got.Inputs["in_flight"] != 2 {
		t.Fatalf("emit: %+v %v", got, err)
	}
	if _, err := em.Emit(ctx, types.Event{Kind: "scale"}); err == nil {
		t.Fatal("an event without a reason was emitted")
	}
	a := wireEvents{l}
	if evs, err := a.List(ctx, 0, "web"); err != nil || len(evs) != 1 || evs[0].Seq != 1 || evs[0].Reason != "busy" {
		t.Fatalf("list: %+v %v", evs, err)
	}
	if evs, err := a.List(ctx, 0, "other"); err != nil || evs == nil || len(evs) != 0 {
		t.Fatalf("list of an app without events: %#v %v", evs, err)
	}
	ch, err := a.Watch(ctx, 0, "")
	if err != nil {
		t.Fatal(err)
	}
	if e := <-ch; e.Seq != 1 || e.App != "web" {
		t.Fatalf("watch: first event %+v", e)
	}
	em.Emit(ctx, types.Event{Kind: "state", App: "web", Reason: "ready"})
	if e := <-ch; e.Seq != 2 || e.Reason != "ready" {
		t.Fatalf("watch: second event %+v", e)
	}
	cancel()
	for range ch {
	}
}
