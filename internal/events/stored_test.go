package events

import (
	"context"
	"encoding/json"
	"testing"

	"github.com/shoal-run/shoal/internal/clock"
	"github.com/shoal-run/shoal/internal/store"
)

// Events as daemons have stored them under store.EventKey: one with every
// field, one with only those always written.
var storedEvents = []string{
	`{"seq":3,"time":"2030-01-01T00:00:01.25Z","kind":"scale","app":"web","replica":"r1","reason":"busy","inputs":{"in_flight":3,"target":1.5}}`,
	`{"seq":4,"time":"2030-01-01T00:00:02Z","kind":"state","reason":"ready"}`,
}

// A log opened on events written before reads them, encodes them to the
// same bytes, shows them to the API with the same JSON, and numbers the
// next event after them.
func TestStoredEventsDecode(t *testing.T) {
	each(t, func(t *testing.T, open func() store.Store) {
		ctx := context.Background()
		s := open()
		for i, raw := range storedEvents {
			if _, err := s.Put(ctx, store.EventKey(int64(3+i)), []byte(raw)); err != nil {
				t.Fatal(err)
			}
		}
		l := New(s, clock.NewFake(epoch), 0)
		evs, err := l.List(ctx, 0, "")
		if err != nil || len(evs) != 2 {
			t.Fatalf("list: %v %v", evs, err)
		}
		if e := evs[0]; e.Seq != 3 || e.Kind != "scale" || e.App != "web" || e.Replica != "r1" || e.Inputs["target"] != 1.5 || e.Time.Nanosecond() != 250_000_000 {
			t.Fatalf("first stored event decoded as %+v", e)
		}
		for i, e := range evs {
			b, _ := json.Marshal(e)
			w, _ := json.Marshal(e.Wire())
			if string(b) != storedEvents[i] || string(w) != storedEvents[i] {
				t.Errorf("event %d:\nstored  %s\nencoded %s\nwire    %s", e.Seq, storedEvents[i], b, w)
			}
		}
		if e := emit(t, l, "web", "next"); e.Seq != 5 {
			t.Fatalf("event after the stored ones has seq %d, want 5", e.Seq)
		}
	})
}
