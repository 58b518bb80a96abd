package serving

import (
	"os"
	"slices"
	"strings"
	"testing"
	"time"
)

// ladderRows expands a ladder table in markdown (from | move | to | event,
// from and to lists separated by commas) into one row per state and
// move, from -> "to event".
func ladderRows(t *testing.T, md string) map[string]string {
	t.Helper()
	rows := map[string]string{}
	head := false
	for _, line := range strings.Split(md, "\n") {
		line = strings.TrimSpace(line)
		if !strings.HasPrefix(line, "|") {
			if head {
				break // the table ends
			}
			continue
		}
		cells := strings.Split(strings.Trim(line, "|"), "|")
		for i := range cells {
			cells[i] = strings.TrimSpace(cells[i])
		}
		if !head {
			if !slices.Equal(cells, []string{"from", "move", "to", "event"}) {
				t.Fatalf("the ladder's table starts with %q, want | from | move | to | event |", line)
			}
			head = true
			continue
		}
		if strings.Trim(strings.Join(cells, ""), "-") == "" {
			continue // the rule under the head
		}
		if len(cells) != 4 {
			t.Fatalf("ladder row %q: %d cells, want 4", line, len(cells))
		}
		for _, from := range strings.Split(cells[0], ",") {
			for _, to := range strings.Split(cells[2], ",") {
				key := strings.TrimSpace(from) + " | " + cells[1] + " | " + strings.TrimSpace(to)
				if _, dup := rows[key]; dup {
					t.Errorf("ladder row %q twice", key)
				}
				rows[key] = cells[3]
			}
		}
	}
	if !head {
		t.Fatal("no ladder table")
	}
	return rows
}

// The ladder in DESIGN.md ("States of a replica") and the table the
// controller moves replicas by are the same.
func TestLadderTableMatchesDesign(t *testing.T) {
	b, err := os.ReadFile("../../DESIGN.md")
	if err != nil {
		t.Fatal(err)
	}
	const title = "## States of a replica (the homeostasis ladder)"
	doc := string(b)
	i := strings.Index(doc, title)
	if i < 0 {
		t.Fatalf("DESIGN.md has no section %q", title)
	}
	doc = doc[i+len(title):]
	if j := strings.Index(doc, "\n## "); j >= 0 {
		doc = doc[:j]
	}
	design, code := ladderRows(t, doc), ladderRows(t, ladderTable())
	for k, ev := range code {
		if got, ok := design[k]; !ok {
			t.Errorf("DESIGN.md's ladder lacks the move %s (event %s)", k, ev)
		} else if got != ev {
			t.Errorf("DESIGN.md's ladder: move %s emits %s, the code's %s", k, got, ev)
		}
	}
	for k := range design {
		if _, ok := code[k]; !ok {
			t.Errorf("DESIGN.md's ladder has the move %s, which the code's has not", k)
		}
	}
}

// Every state a step reaches is one a record can list, and a move is
// refused from a state the ladder does not take it from.
func TestLadderMoves(t *testing.T) {
	for _, s := range ladder {
		switch s.to.listed() {
		case StatePending, StateStarting, StateReady, StateFrozen, StateDraining, StateHalted, StateStopped, StateFailed:
		default:
			t.Errorf("move %s reaches %s, listed as %s", s.mv, s.to, s.to.listed())
		}
	}
	h := newHarness(t)
	h.deploy("")
	ctl := h.m.app("hello")
	ctl.mu.Lock()
	defer ctl.unlock()
	r := &replica{state: StateFrozen, rec: replicaRecord{ID: "hello-x", State: StateFrozen}}
	ctl.reps[r.rec.ID] = r
	if ctl.move(r, mvFreeze, "", nil) || r.state != StateFrozen {
		t.Errorf("a frozen replica froze again: now %s", r.state)
	}
	if !ctl.move(r, mvThaw, "", nil) || r.state != StateThawing || r.rec.State != StateFrozen {
		t.Errorf("thaw: %s listed %s, want thawing listed frozen", r.state, r.rec.State)
	}
	if !ctl.move(r, mvFail, "", nil) || ctl.move(r, mvThawed, "", nil) || r.rec.State != StateFailed {
		t.Errorf("a failed replica thawed: %s listed %s", r.state, r.rec.State)
	}
	if !ctl.move(r, mvRemove, "", nil) || r.state != StateDead || ctl.reps[r.rec.ID] != r {
		t.Errorf("a failed replica removed: %s, listed %v; want dead and listed", r.state, ctl.reps[r.rec.ID] != nil)
	}
	if !ctl.move(r, mvForget, "", nil) || ctl.reps[r.rec.ID] != nil || !ctl.unsaved[r.rec.ID] {
		t.Errorf("a forgotten replica is still listed, or its record is not deleted")
	}
}

// What a move leaves to do once ctl.mu is released is data: a freeze
// queues the freeze of its replica, with the app's drain_timeout.
func TestMoveQueuesActions(t *testing.T) {
	h := newHarness(t)
	h.deploy(`drain_timeout = "7s"`)
	ctl := h.m.app("hello")
	ctl.mu.Lock()
	defer ctl.unlock()
	r := &replica{state: StateReady, rec: replicaRecord{ID: "hello-y", State: StateReady}}
	ctl.reps[r.rec.ID] = r
	ctl.freeze(r, "idle")
	if len(ctl.acts) != 1 || ctl.acts[0].kind != actFreeze || ctl.acts[0].r != r || ctl.acts[0].grace != 7*time.Second {
		t.Fatalf("after a freeze the queue holds %+v, want one actFreeze of %s for 7s", ctl.acts, r.rec.ID)
	}
	ctl.acts = nil // the fake node has no such replica
	ctl.move(r, mvFrozen, "", nil)
}
