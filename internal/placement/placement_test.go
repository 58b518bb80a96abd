package placement

import (
	"fmt"
	"slices"
	"testing"
)

func slots(apps ...map[string]int) []Slot {
	out := make([]Slot, len(apps))
	for i, a := range apps {
		out[i] = Slot{Name: fmt.Sprint(i), Apps: a}
	}
	return out
}

func TestPick(t *testing.T) {
	cases := []struct {
		name  string
		app   string
		slots []Slot
		rules Rules
		want  int
	}{
		{"no slot", "a", nil, Rules{}, -1},
		{"empty host: the first", "a", slots(nil, nil, nil), Rules{}, 0},
		{"fewest replicas", "a", slots(map[string]int{"b": 2}, map[string]int{"c": 1}, map[string]int{"b": 1, "c": 1}), Rules{}, 1},
		{"own app apart before load", "a", slots(map[string]int{"a": 1}, map[string]int{"b": 3}), Rules{}, 1},
		{"apart rule before load", "a", slots(map[string]int{"noisy": 1}, map[string]int{"b": 3}), Rules{Apart: []string{"noisy"}}, 1},
		{"own app before apart rule", "a", slots(map[string]int{"a": 1}, map[string]int{"noisy": 1}), Rules{Apart: []string{"noisy"}}, 1},
		{"with rule before load", "a", slots(map[string]int{"b": 1}, map[string]int{"cache": 2}), Rules{With: []string{"cache"}}, 1},
		{"own app before with rule", "a", slots(map[string]int{"cache": 1, "a": 1}, map[string]int{"b": 1}), Rules{With: []string{"cache"}}, 1},
		{"apart before with", "a", slots(map[string]int{"cache": 1, "noisy": 1}, map[string]int{"b": 1}), Rules{With: []string{"cache"}, Apart: []string{"noisy"}}, 1},
		{"tie: the first", "a", slots(map[string]int{"b": 1}, map[string]int{"c": 1}), Rules{}, 0},
	}
	for _, c := range cases {
		if got := Pick(c.app, c.slots, c.rules); got != c.want {
			t.Errorf("%s: Pick = %d, want %d", c.name, got, c.want)
		}
	}
}

// Replicas of small apps go one per CPU while CPUs are free of the app,
// then to the CPU with the fewest replicas; large and unlimited replicas
// are not pinned; a released CPU is the next one taken.
func TestCPUsPlace(t *testing.T) {
	c := NewCPUs([]int{0, 1, 2, 3}, nil)
	place := func(id, app string, max float64) string { return c.Place(Request{ID: id, App: app, MaxCPU: max}) }
	var got []string
	for i := 0; i < 4; i++ {
		got = append(got, place(fmt.Sprint("a", i), "a", 0.5))
	}
	if !slices.Equal(got, []string{"0", "1", "2", "3"}) {
		t.Fatalf("four replicas of one app on %v, want one per CPU", got)
	}
	if cpu := place("a0", "a", 0.5); cpu != "0" {
		t.Fatalf("placing a placed replica again: %q, want its CPU 0", cpu)
	}
	if cpu := place("big", "big", 2); cpu != "" {
		t.Fatalf("a replica with max_cpu 2 pinned to %q", cpu)
	}
	if cpu := place("free", "free", 0); cpu != "" {
		t.Fatalf("a replica with no CPU limit pinned to %q", cpu)
	}
	if cpu := place("one", "one", 1); cpu != "0" {
		t.Fatalf("a replica with max_cpu 1 on %q, want 0 (all CPUs hold one, the first wins)", cpu)
	}
	// b's two replicas avoid the CPU the first took; then the load
	// decides: CPUs 1-3 hold one each, 0 holds two.
	if b0, b1 := place("b0", "b", 0.25), place("b1", "b", 0.25); b0 != "1" || b1 != "2" {
		t.Fatalf("b's replicas on %s and %s, want 1 and 2", b0, b1)
	}
	c.Release("a3")
	if cpu := place("c0", "c", 0.1); cpu != "3" {
		t.Fatalf("after CPU 3 was released a new replica went to %q", cpu)
	}
	if l := c.Load(); l[0] != 2 || l[1] != 2 || l[2] != 2 || l[3] != 1 {
		t.Fatalf("load %v", l)
	}
}

// The rules of an app reach Pick, and adopted replicas count.
func TestCPUsRulesAndAdopt(t *testing.T) {
	rules := func(app string) Rules {
		if app == "web" {
			return Rules{Apart: []string{"batch"}, With: []string{"cache"}}
		}
		return Rules{}
	}
	c := NewCPUs([]int{4, 5, 6}, rules)
	c.Adopt("batch-1", "batch", "4")
	c.Adopt("cache-1", "cache", "6")
	c.Adopt("bad", "x", "9")    // not a CPU of this placer
	c.Adopt("bad2", "x", "4-5") // not one CPU
	if cpu := c.Place(Request{ID: "web-1", App: "web", MaxCPU: 1}); cpu != "6" {
		t.Fatalf("web went to %q, want 6 beside its cache", cpu)
	}
	if cpu := c.Place(Request{ID: "web-2", App: "web", MaxCPU: 1}); cpu != "5" {
		t.Fatalf("web's second replica went to %q, want 5 (apart from web-1 and from batch)", cpu)
	}
	if cpu := c.Place(Request{ID: "other", App: "other", MaxCPU: 1}); cpu != "4" {
		t.Fatalf("another app went to %q, want 4 (every CPU holds one; the first wins)", cpu)
	}
}

// One CPU or none: nothing to choose, nothing pinned.
func TestCPUsSingle(t *testing.T) {
	for _, cpus := range [][]int{nil, {3}} {
		if cpu := NewCPUs(cpus, nil).Place(Request{ID: "a", App: "a", MaxCPU: 0.5}); cpu != "" {
			t.Fatalf("CPUs %v: pinned to %q", cpus, cpu)
		}
	}
}

func TestParseList(t *testing.T) {
	for in, want := range map[string][]int{"": nil, "0": {0}, "0-3": {0, 1, 2, 3}, "0-1,4,6-7\n": {0, 1, 4, 6, 7}} {
		got, err := ParseList(in)
		if err != nil || !slices.Equal(got, want) {
			t.Errorf("ParseList(%q) = %v, %v; want %v", in, got, err, want)
		}
	}
	for _, bad := range []string{"a", "1-", "3-1", "-1", "1,,2"} {
		if _, err := ParseList(bad); err == nil {
			t.Errorf("ParseList(%q): no error", bad)
		}
	}
	if cpus, err := HostCPUs(); err != nil || len(cpus) == 0 {
		t.Fatalf("HostCPUs: %v, %v", cpus, err)
	}
}
