package jobs

import (
	"fmt"
	"testing"
)

// drain starts jobs one at a time (one slot), finishing each before the
// next, and returns the tenants in the order their jobs started.
func drain(s *Scheduler, n int) []string {
	var order []string
	for i := 0; i < n; i++ {
		e, ok := s.Next()
		if !ok {
			break
		}
		order = append(order, e.Tenant)
		s.Done(e.Tenant)
	}
	return order
}

func push(s *Scheduler, tenant string, n int, seq *uint64) {
	for i := 0; i < n; i++ {
		*seq++
		s.Push(Entry{ID: fmt.Sprintf("%s-%d", tenant, *seq), Tenant: tenant, Seq: *seq})
	}
}

func count(order []string) map[string]int {
	m := map[string]int{}
	for _, t := range order {
		m[t]++
	}
	return m
}

func TestFairShareEqualWeights(t *testing.T) {
	s := NewScheduler()
	var seq uint64
	// Tenant a floods the queue first; b arrives after with fewer jobs.
	push(s, "a", 100, &seq)
	push(s, "b", 10, &seq)
	order := drain(s, 20)
	if c := count(order); c["a"] != 10 || c["b"] != 10 {
		t.Fatalf("first 20 starts: %v, want 10 each (order %v)", c, order)
	}
	// Then a has the machine to itself.
	if c := count(drain(s, 10)); c["a"] != 10 {
		t.Fatalf("after b's backlog: %v, want only a", c)
	}
}

func TestFairShareWeighted(t *testing.T) {
	s := NewScheduler()
	s.Weights = map[string]float64{"a": 3, "b": 1}
	var seq uint64
	push(s, "b", 50, &seq)
	push(s, "a", 50, &seq)
	order := drain(s, 40)
	c := count(order)
	if c["a"] != 30 || c["b"] != 10 {
		t.Fatalf("first 40 starts: %v, want a:30 b:10 for weights 3:1 (order %v)", c, order)
	}
	// Every prefix stays within one job of the 3:1 share.
	a, b := 0, 0
	for i, tn := range order {
		if tn == "a" {
			a++
		} else {
			b++
		}
		if d := float64(a) - 3*float64(b); d > 3 || d < -3 {
			t.Fatalf("after %d starts a=%d b=%d: off the 3:1 share", i+1, a, b)
		}
	}
}

func TestFairShareWithConcurrentSlots(t *testing.T) {
	s := NewScheduler()
	var seq uint64
	push(s, "a", 40, &seq)
	push(s, "b", 40, &seq)
	// Four slots: keep four running, finish the oldest each round.
	var running []Entry
	var order []string
	for len(order) < 40 {
		for len(running) < 4 {
			e, ok := s.Next()
			if !ok {
				break
			}
			running = append(running, e)
			order = append(order, e.Tenant)
		}
		s.Done(running[0].Tenant)
		running = running[1:]
	}
	if c := count(order[:40]); c["a"] != 20 || c["b"] != 20 {
		t.Fatalf("first 40 starts with 4 slots: %v, want 20 each", c)
	}
}

func TestIdleTenantEarnsNoCredit(t *testing.T) {
	s := NewScheduler()
	var seq uint64
	push(s, "a", 30, &seq)
	drain(s, 20) // a runs alone for a while
	push(s, "b", 30, &seq)
	// b does not get 20 jobs in a row to "catch up": the two alternate.
	if c := count(drain(s, 10)); c["a"] != 5 || c["b"] != 5 {
		t.Fatalf("after b arrives: %v, want 5 each", c)
	}
}

func TestPriorityWithinTenant(t *testing.T) {
	s := NewScheduler()
	s.Push(Entry{ID: "low", Tenant: "a", Priority: -5, Seq: 1})
	s.Push(Entry{ID: "mid1", Tenant: "a", Seq: 2})
	s.Push(Entry{ID: "high", Tenant: "a", Priority: 10, Seq: 3})
	s.Push(Entry{ID: "mid2", Tenant: "a", Seq: 4})
	var ids []string
	for {
		e, ok := s.Next()
		if !ok {
			break
		}
		ids = append(ids, e.ID)
	}
	if fmt.Sprint(ids) != "[high mid1 mid2 low]" {
		t.Fatalf("order %v, want [high mid1 mid2 low]", ids)
	}
}

func TestQuotas(t *testing.T) {
	s := NewScheduler()
	s.Quotas = map[string]Quota{"a": {MaxQueued: 3, MaxRunning: 1}}
	var seq uint64
	if !s.CanQueue("a", 3) || s.CanQueue("a", 4) {
		t.Fatal("MaxQueued 3: want 3 allowed and 4 refused")
	}
	push(s, "a", 3, &seq)
	push(s, "b", 3, &seq)
	if s.CanQueue("a", 1) {
		t.Fatal("a has 3 queued of 3: one more must be refused")
	}
	if !s.CanQueue("b", 100) {
		t.Fatal("b has no quota")
	}
	// a may run one at a time; b fills the other slots.
	var started []string
	for {
		e, ok := s.Next()
		if !ok {
			break
		}
		started = append(started, e.Tenant)
	}
	if c := count(started); c["a"] != 1 || c["b"] != 3 {
		t.Fatalf("started %v with a limited to 1 running", c)
	}
	s.Done("a")
	if e, ok := s.Next(); !ok || e.Tenant != "a" {
		t.Fatalf("after a's job ended: %v %v, want a's next job", e, ok)
	}
}

func TestRemoveQueued(t *testing.T) {
	s := NewScheduler()
	s.Push(Entry{ID: "x", Tenant: "a", Seq: 1})
	s.Push(Entry{ID: "y", Tenant: "a", Seq: 2})
	if !s.Remove("a", "x") || s.Remove("a", "x") || s.Remove("b", "y") {
		t.Fatal("Remove: want true once for a queued job, false otherwise")
	}
	if e, _ := s.Next(); e.ID != "y" {
		t.Fatalf("next %q, want y", e.ID)
	}
	if s.Queued("") != 0 || s.Running("a") != 1 {
		t.Fatalf("queued %d running %d", s.Queued(""), s.Running("a"))
	}
}
