package agent

import (
	"testing"
)

// BenchmarkNodeCall is one node.Node call (Usage) made on this node's
// own Node (the baseline) and on another node's through its agent, over
// real HTTP on loopback with the cluster secret.
func BenchmarkNodeCall(b *testing.B) {
	fake := newFakeNode()
	fake.known["web-1"] = true
	b.Run("local", func(b *testing.B) {
		for b.Loop() {
			if _, err := fake.Usage(b.Context(), "web-1"); err != nil {
				b.Fatal(err)
			}
		}
	})
	b.Run("remote", func(b *testing.B) {
		st := testStore(b)
		srv := serve(b, (&Server{Name: "n2", Secret: testSecret, Node: fake}).Handler())
		addNode(b, st, "n2", srv)
		r := NewClient(st, testSecret).Remote("n2")
		for b.Loop() {
			if _, err := r.Usage(b.Context(), "web-1"); err != nil {
				b.Fatal(err)
			}
		}
	})
}
