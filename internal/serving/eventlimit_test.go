package serving

import (
	"context"
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/shoal-run/shoal/internal/api/types"
	"github.com/shoal-run/shoal/internal/clock"
)

// nopEvents is an EventLog that keeps nothing: the queue's channel is what
// the test reads.
type nopEvents struct{}

func (nopEvents) Emit(_ context.Context, e types.Event) (types.Event, error) { return e, nil }

// One app's events beyond eventsPerApp in a window are not recorded but
// told, by kind, in one summary event at the window's end; another app's
// events are recorded all the same, and the next window records again.
func TestEventsLimitedByApp(t *testing.T) {
	clk := clock.NewFake(time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC))
	x := &eventQueue{log: slog.New(slog.DiscardHandler), events: nopEvents{}, q: make(chan types.Event, 4096), clock: clk}
	for i := range eventsPerApp + 40 {
		kind := "scale"
		if i%10 == 0 {
			kind = "health"
		}
		x.emit(kind, "noisy", "", "flaps", nil)
		if i == eventsPerApp {
			x.emit("fail", "calm", "calm-1", "crashed", nil)
		}
	}
	drain := func() map[string][]types.Event {
		out := map[string][]types.Event{}
		for {
			select {
			case e := <-x.q:
				out[e.App] = append(out[e.App], e)
			default:
				return out
			}
		}
	}
	got := drain()
	if n := len(got["noisy"]); n != eventsPerApp {
		t.Fatalf("noisy app: %d events recorded in its first window, want %d", n, eventsPerApp)
	}
	if n := len(got["calm"]); n != 1 {
		t.Fatalf("calm app: %d events recorded, want 1", n)
	}
	clk.Advance(eventWindow)
	var sum types.Event
	deadline := time.Now().Add(60 * time.Second)
	for sum.Kind == "" {
		if time.Now().After(deadline) {
			t.Fatal("no summary at the window's end")
		}
		select {
		case sum = <-x.q:
		default:
			time.Sleep(time.Millisecond)
		}
	}
	if sum.Kind != "summary" || sum.App != "noisy" || sum.Inputs["scale"] != 36 || sum.Inputs["health"] != 4 ||
		!strings.Contains(sum.Reason, "… and 36 more scale events, 4 more health events") {
		t.Fatalf("summary: %+v", sum)
	}
	x.emit("scale", "noisy", "", "again", nil)
	if got := drain(); len(got["noisy"]) != 1 || got["noisy"][0].Reason != "again" {
		t.Fatalf("next window: %+v", got)
	}
}

// The kinds that tell a change of an app's state are recorded even when
// the app's budget is spent, and take nothing from it: "waiting" is told
// only when it changes, so a dropped one would be lost for good.
func TestStateEventsNotLimited(t *testing.T) {
	clk := clock.NewFake(time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC))
	x := &eventQueue{log: slog.New(slog.DiscardHandler), events: nopEvents{}, q: make(chan types.Event, 4096), clock: clk}
	for range eventsPerApp + 10 {
		x.emit("scale", "busy", "", "flaps", nil)
	}
	kinds := []string{"deploy", "rollback", "rollout", "remove", "lost", "waiting", "reseed", "merge-failed", "checkpoint", "warning"}
	for _, k := range kinds {
		x.emit(k, "busy", "", "state "+k, nil)
	}
	got := map[string]int{}
	for len(x.q) > 0 {
		got[(<-x.q).Kind]++
	}
	if got["scale"] != eventsPerApp {
		t.Errorf("%d scale events recorded, want %d", got["scale"], eventsPerApp)
	}
	for _, k := range kinds {
		if got[k] != 1 {
			t.Errorf("%d %s events recorded past the budget, want 1", got[k], k)
		}
	}
	clk.Advance(eventWindow)
	var sum types.Event
	deadline := time.Now().Add(60 * time.Second)
	for sum.Kind == "" {
		if time.Now().After(deadline) {
			t.Fatal("no summary at the window's end")
		}
		select {
		case sum = <-x.q:
		default:
			time.Sleep(time.Millisecond)
		}
	}
	if len(sum.Inputs) != 1 || sum.Inputs["scale"] != 10 {
		t.Fatalf("summary counts %v, want only 10 scale", sum.Inputs)
	}
}
