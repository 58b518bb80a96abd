package serving

import (
	"log/slog"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/shoal-run/shoal/internal/api/types"
	"github.com/shoal-run/shoal/internal/clock"
	"github.com/shoal-run/shoal/internal/manifest"
)

// liveDisp is a Dispatcher whose nodes are live as live says.
type liveDisp struct {
	Dispatcher
	live map[string]bool
}

func (d liveDisp) IsLive(node string) bool { return d.live[node] }

// An ordinal's start, in a cluster, goes to the node that holds its
// volumes. When that node stopped being live after the round that
// started it: without stateful.reseed the start is refused (the ordinal
// waits for it), and no reseed is announced nor is it placed anywhere;
// with reseed it starts anywhere, with a reseed event.
func TestPlaceOrdinalNodeLeft(t *testing.T) {
	d := liveDisp{live: map[string]bool{"n2": true}}
	m := &Manager{disp: d, eventQueue: eventQueue{log: slog.New(slog.DiscardHandler), events: nopEvents{},
		q: make(chan types.Event, 16), clock: clock.NewFake(time.Unix(1e9, 0))}}
	ctl := &appCtl{name: "db", m: m, rec: appRecord{VolumeNodes: map[int]string{1: "n2"}}}
	r := &replica{rec: replicaRecord{ID: "db-1-x", Ordinal: ptr(1)}}
	var cfg manifest.Config
	cfg.Stateful.Replicas = 3

	placed, err := ctl.placeOrdinal(r, cfg)
	if err != nil || !slices.Equal(placed.Placement.Nodes, []string{"n2"}) {
		t.Fatalf("n2 live: placement %v, %v", placed.Placement.Nodes, err)
	}

	d.live["n2"] = false // n2 left between the round and the start
	placed, err = ctl.placeOrdinal(r, cfg)
	if err == nil || !strings.Contains(err.Error(), "waits for node n2") {
		t.Fatalf("n2 gone, no reseed: placement %v, err %v; want a refusal", placed.Placement.Nodes, err)
	}
	if n := len(m.q); n != 0 {
		t.Fatalf("%d events on a refused start, want none: %v", n, <-m.q)
	}

	cfg.Stateful.Reseed = true
	placed, err = ctl.placeOrdinal(r, cfg)
	if err != nil || len(placed.Placement.Nodes) != 0 {
		t.Fatalf("n2 gone, reseed: placement %v, %v", placed.Placement.Nodes, err)
	}
	if len(m.q) != 1 {
		t.Fatalf("%d events on a reseed, want 1", len(m.q))
	}
	if e := <-m.q; e.Kind != "reseed" {
		t.Fatalf("event %+v, want reseed", e)
	}
}
