package placement

import (
	"strings"
	"testing"
)

// node is a node of 4 CPUs and 8 GiB holding apps.
func node(name string, apps map[string]int, placed Ask) Node {
	return Node{Slot: Slot{Name: name, Apps: apps}, CPUs: 4, Memory: 8 << 30, Placed: placed}
}

// TestPickNode: the hard constraints (fit, [placement] nodes) exclude
// nodes; spread, anti-colocation, preference, co-location and load then
// order the rest.
func TestPickNode(t *testing.T) {
	half := Ask{CPU: 0.5, Memory: 256 << 20}
	for _, tc := range []struct {
		name  string
		ask   Ask
		nodes []Node
		aff   Affinity
		rules Rules
		want  string // the node picked; "" for an error
		err   string // in the error
	}{
		{name: "spread before load", ask: half,
			nodes: []Node{node("n1", map[string]int{"web": 1}, Ask{}), node("n2", map[string]int{"db": 3}, Ask{})},
			want:  "n2"},
		{name: "least loaded among equals", ask: half,
			nodes: []Node{node("n1", map[string]int{"db": 2}, Ask{}), node("n2", map[string]int{"db": 1}, Ask{})},
			want:  "n2"},
		{name: "the most CPU left breaks a tie of counts", ask: half,
			nodes: []Node{node("n1", map[string]int{"db": 1}, Ask{CPU: 3}), node("n2", map[string]int{"db": 1}, Ask{CPU: 1})},
			want:  "n2"},
		{name: "CPU does not fit", ask: Ask{CPU: 2},
			nodes: []Node{node("n1", nil, Ask{CPU: 3}), node("n2", map[string]int{"web": 5}, Ask{CPU: 1})},
			want:  "n2"},
		{name: "memory does not fit", ask: Ask{Memory: 4 << 30},
			nodes: []Node{node("n1", nil, Ask{Memory: 6 << 30}), node("n2", map[string]int{"web": 2}, Ask{})},
			want:  "n2"},
		{name: "nothing fits", ask: Ask{CPU: 3},
			nodes: []Node{node("n1", nil, Ask{CPU: 2}), node("n2", nil, Ask{CPU: 1.5})},
			err:   "n1 has 2 of 4 CPUs free; n2 has 2.5 of 4 CPUs free"},
		{name: "unknown capacity does not bound", ask: Ask{CPU: 64, Memory: 1 << 40},
			nodes: []Node{{Slot: Slot{Name: "n1"}}},
			want:  "n1"},
		{name: "required nodes are hard", ask: half,
			nodes: []Node{node("n1", nil, Ask{}), node("n2", map[string]int{"web": 3}, Ask{}), node("n3", nil, Ask{})},
			aff:   Affinity{Nodes: []string{"n2"}},
			want:  "n2"},
		{name: "required nodes not live", ask: half,
			nodes: []Node{node("n1", nil, Ask{})},
			aff:   Affinity{Nodes: []string{"n7", "n8"}},
			err:   "none of the nodes in [placement] nodes (n7, n8) is live"},
		{name: "prefer among equally spread", ask: half,
			nodes: []Node{node("n1", nil, Ask{}), node("n2", map[string]int{"db": 4}, Ask{})},
			aff:   Affinity{Prefer: []string{"n2"}},
			want:  "n2"},
		{name: "spread before prefer", ask: half,
			nodes: []Node{node("n1", nil, Ask{}), node("n2", map[string]int{"web": 1}, Ask{})},
			aff:   Affinity{Prefer: []string{"n2"}},
			want:  "n1"},
		{name: "apart before prefer", ask: half,
			nodes: []Node{node("n1", map[string]int{"noisy": 1}, Ask{}), node("n2", nil, Ask{})},
			aff:   Affinity{Prefer: []string{"n1"}}, rules: Rules{Apart: []string{"noisy"}},
			want: "n2"},
		{name: "with joins", ask: half,
			nodes: []Node{node("n1", nil, Ask{}), node("n2", map[string]int{"cache": 1}, Ask{})},
			rules: Rules{With: []string{"cache"}},
			want:  "n2"},
		{name: "no node", ask: half, err: "no live node"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			i, err := PickNode("web", tc.ask, tc.nodes, tc.aff, tc.rules)
			if tc.want == "" {
				if err == nil || !strings.Contains(err.Error(), tc.err) {
					t.Fatalf("picked %d, %v; want an error with %q", i, err, tc.err)
				}
				return
			}
			if err != nil || tc.nodes[i].Name != tc.want {
				t.Fatalf("picked %d, %v; want %s", i, err, tc.want)
			}
		})
	}
}
