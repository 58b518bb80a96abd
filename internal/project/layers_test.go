package project

import (
	"sort"
	"strings"
	"testing"
)

// apart names packages that must not depend on others, even through
// packages between them (non-test files): the app controller, the Node
// contract and the cluster's dispatcher reach containers and the network
// only through a node.Node, whose implementation on this host (localnode)
// is the daemon's to wire in.
var apart = map[string][]string{
	"serving":  {"runtime", "network"},
	"node":     {"runtime", "network"},
	"dispatch": {"runtime", "network"},
}

// TestLayersKeptApart fails when a package of apart depends on one it must
// not (or on a package below it), naming the chain of imports that leads
// there.
func TestLayersKeptApart(t *testing.T) {
	_, pkgs := repoImports(t)
	names := make([]string, 0, len(apart))
	for p := range apart {
		names = append(names, p)
	}
	sort.Strings(names)
	for _, p := range names {
		if _, ok := pkgs[p]; !ok {
			t.Errorf("internal/%s holds no Go package: update apart", p)
			continue
		}
		for _, bad := range apart[p] {
			if chain := importChain(pkgs, p, bad); chain != nil {
				t.Errorf("internal/%s depends on internal/%s: %s", p, bad, strings.Join(chain, " → "))
			}
		}
	}
}

// importChain returns the shortest chain of imports from package from to
// package to or one below it (to/...), or nil when there is none.
func importChain(pkgs map[string][]string, from, to string) []string {
	prev := map[string]string{from: ""}
	queue := []string{from}
	for len(queue) > 0 {
		p := queue[0]
		queue = queue[1:]
		if p == to || strings.HasPrefix(p, to+"/") {
			var chain []string
			for q := p; q != ""; q = prev[q] {
				chain = append([]string{q}, chain...)
			}
			return chain
		}
		for _, i := range pkgs[p] {
			if _, ok := prev[i]; !ok {
				prev[i] = p
				queue = append(queue, i)
			}
		}
	}
	return nil
}
