package serving

import (
	"errors"
	"slices"
	"testing"
	"time"

	"github.com/shoal-run/shoal/internal/appapi"
	"github.com/shoal-run/shoal/internal/route"
)

func stepStrings(p plan) []string {
	var out []string
	for _, s := range p.steps {
		out = append(out, s.String())
	}
	return out
}

// A rollback is table-tested: the count it brings the revision back to,
// its thaws (most recently used first) and its starts.
func TestDecideRollback(t *testing.T) {
	t0 := time.Date(2026, 1, 1, 12, 0, 0, 0, time.UTC)
	ago := func(d time.Duration) time.Time { return t0.Add(-d) }
	rep := func(id string, rev int, s State, active time.Duration) repView {
		return repView{id: id, rev: rev, state: s, active: ago(active)}
	}
	two := []trafficShare{{Revision: 2, Percent: 100}}
	const why = ": rollback to revision 1"
	cases := []struct {
		name  string
		v     view
		load  route.Load
		want  int
		steps []string
	}{
		{
			name:  "two in service, two frozen of revision 1: both thaw, the most recently used first",
			v:     view{max: 10, revision: 2, traffic: two, reps: []repView{rep("a", 1, StateFrozen, time.Hour), rep("b", 1, StateFrozen, time.Minute), rep("c", 2, StateReady, 0), rep("d", 2, StateStarting, 0)}},
			want:  2,
			steps: []string{"thaw b" + why, "thaw a" + why},
		},
		{
			name:  "three in service, one frozen: it thaws, two start",
			v:     view{max: 10, revision: 2, traffic: two, reps: []repView{rep("a", 1, StateFrozen, time.Hour), rep("c", 2, StateReady, 0), rep("d", 2, StateReady, 0), rep("e", 2, StatePending, 0)}},
			want:  3,
			steps: []string{"thaw a" + why, "start 1" + why, "start 1" + why},
		},
		{
			name:  "one in service, two frozen: only the most recently used thaws",
			v:     view{max: 10, revision: 2, traffic: two, reps: []repView{rep("a", 1, StateFrozen, time.Minute), rep("b", 1, StateFrozen, time.Hour), rep("c", 2, StateReady, 0)}},
			want:  1,
			steps: []string{"thaw a" + why},
		},
		{
			name: "nothing in service, nothing waits: nothing thaws",
			v:    view{max: 10, revision: 2, traffic: two, reps: []repView{rep("a", 1, StateFrozen, time.Minute), rep("c", 2, StateFrozen, 0)}},
		},
		{
			name:  "nothing in service, a request waits: one thaws",
			v:     view{max: 10, revision: 2, traffic: two, woken: true, reps: []repView{rep("a", 1, StateFrozen, time.Minute)}},
			want:  1,
			steps: []string{"thaw a" + why},
		},
		{
			name:  "a request in flight, nothing of revision 1: one starts",
			v:     view{max: 10, revision: 2, traffic: two},
			load:  route.Load{InFlight: 1},
			want:  1,
			steps: []string{"start 1" + why},
		},
		{
			name:  "min 2 over one in service, one of revision 1 ready already: one more starts",
			v:     view{min: 2, max: 10, revision: 2, traffic: two, reps: []repView{rep("a", 1, StateReady, 0), rep("c", 2, StateReady, 0)}},
			want:  2,
			steps: []string{"start 1" + why},
		},
		{
			name:  "four in service, max 3",
			v:     view{max: 3, revision: 2, traffic: two, reps: []repView{rep("c", 2, StateReady, 0), rep("d", 2, StateReady, 0), rep("e", 2, StateReady, 0), rep("f", 2, StateReady, 0)}},
			want:  3,
			steps: []string{"start 1" + why, "start 1" + why, "start 1" + why},
		},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			p := decideRollback(c.v, c.load, 1)
			if p.want != c.want || !slices.Equal(stepStrings(p), c.steps) {
				t.Fatalf("got want %d, steps %q; want %d, %q", p.want, stepStrings(p), c.want, c.steps)
			}
		})
	}
}

// A replica's replicate is table-tested: what it thaws or starts, or why
// it is refused.
func TestDecideReplicate(t *testing.T) {
	t0 := time.Date(2026, 1, 1, 12, 0, 0, 0, time.UTC)
	ago := func(d time.Duration) time.Time { return t0.Add(-d) }
	rep := func(id string, rev int, s State, active time.Duration) repView {
		return repView{id: id, rev: rev, state: s, active: ago(active)}
	}
	one := []trafficShare{{Revision: 1, Percent: 100}}
	split := []trafficShare{{Revision: 1, Percent: 50}, {Revision: 2, Percent: 50}}
	const why = ": replicate asked by me"
	cases := []struct {
		name   string
		v      view
		want   int
		steps  []string
		refuse string // the refusal's reason
	}{
		{
			name:  "nothing frozen: one starts",
			v:     view{max: 3, revision: 1, traffic: one, reps: []repView{rep("me", 1, StateReady, 0)}},
			want:  2,
			steps: []string{"start 1" + why},
		},
		{
			name:  "two frozen: the most recently used thaws",
			v:     view{max: 3, revision: 1, traffic: one, reps: []repView{rep("a", 1, StateFrozen, time.Hour), rep("b", 1, StateFrozen, time.Minute), rep("me", 1, StateReady, 0)}},
			want:  2,
			steps: []string{"thaw b" + why},
		},
		{
			name:  "a traffic split: one more of the caller's revision",
			v:     view{max: 3, revision: 1, traffic: split, reps: []repView{rep("a", 1, StateFrozen, 0), rep("me", 2, StateReady, 0)}},
			want:  2,
			steps: []string{"start 2" + why},
		},
		{
			name:  "the caller's revision takes no traffic: one of the current one",
			v:     view{max: 3, revision: 1, traffic: one, reps: []repView{rep("a", 1, StateFrozen, 0), rep("me", 2, StateReady, 0)}},
			want:  2,
			steps: []string{"thaw a" + why},
		},
		{
			name:   "at max with a halted one",
			v:      view{max: 2, revision: 1, traffic: one, reps: []repView{rep("a", 1, StateHalted, 0), rep("me", 1, StateReady, 0)}},
			refuse: "max",
		},
		{
			name:   "the caller drains",
			v:      view{max: 3, revision: 1, traffic: one, reps: []repView{rep("me", 1, StateDraining, 0)}},
			refuse: "state",
		},
		{
			name:   "backing off: no start",
			v:      view{max: 3, revision: 1, traffic: one, backoff: t0.Add(time.Second), reps: []repView{rep("me", 1, StateReady, 0)}},
			refuse: "backoff",
		},
		{
			name:  "backing off, one frozen: it thaws",
			v:     view{max: 3, revision: 1, traffic: one, backoff: t0.Add(time.Second), reps: []repView{rep("a", 1, StateFrozen, 0), rep("me", 1, StateReady, 0)}},
			want:  2,
			steps: []string{"thaw a" + why},
		},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			p, err := decideReplicate(c.v, "me", t0)
			var ref *appapi.Refusal
			switch {
			case c.refuse != "":
				if !errors.As(err, &ref) || ref.Reason != c.refuse {
					t.Fatalf("got %v, want a refusal for %s", err, c.refuse)
				}
			case err != nil:
				t.Fatal(err)
			case p.want != c.want || p.cause != causeSelf || !slices.Equal(stepStrings(p), c.steps):
				t.Fatalf("got want %d (%s), steps %q; want %d, %q", p.want, p.cause, stepStrings(p), c.want, c.steps)
			}
		})
	}
}
