package placement

import (
	"fmt"
	"slices"
	"strings"
)

// Ask is what one replica asks of the node it goes to: CPU in cores and
// memory in bytes (0: it asks for none of that resource).
type Ask struct {
	CPU    float64
	Memory int64
}

// Node is a cluster node as placement sees it: its capacity and what the
// replicas placed on it ask in all.
type Node struct {
	Slot
	// CPUs and Memory are the node's capacity (0: not known, no bound).
	CPUs   float64
	Memory int64
	// Placed is the sum of what the replicas on the node ask.
	Placed Ask
}

// Affinity is an app's choice of nodes ([placement] in its shoal.toml).
type Affinity struct {
	// Nodes, when set, are the only nodes its replicas may run on.
	Nodes []string
	// Prefer are nodes its replicas go to when the spread allows.
	Prefer []string
}

// fits reports whether ask fits in what n has left, and if not, why.
func (n Node) fits(ask Ask) (bool, string) {
	if n.CPUs > 0 && ask.CPU > 0 && n.Placed.CPU+ask.CPU > n.CPUs+1e-9 {
		return false, fmt.Sprintf("%s has %g of %g CPUs free", n.Name, max(n.CPUs-n.Placed.CPU, 0), n.CPUs)
	}
	if n.Memory > 0 && ask.Memory > 0 && n.Placed.Memory+ask.Memory > n.Memory {
		return false, fmt.Sprintf("%s has %d of %d bytes of memory free", n.Name, max(n.Memory-n.Placed.Memory, 0), n.Memory)
	}
	return true, ""
}

// PickNode returns the index of the node where a replica of app that asks
// for ask goes, or an error that says why none can take it. The hard
// constraints come first: a node outside aff.Nodes (when set) or without
// room for ask is never picked. The nodes left are compared in this order,
// each deciding only between nodes the ones before it leave equal:
//
//  1. fewest replicas of app itself (an app's replicas spread out, so
//     that a lost node takes as few of them as possible);
//  2. fewest replicas of the apps in rules.Apart;
//  3. a node of aff.Prefer before one that is not;
//  4. most replicas of the apps in rules.With;
//  5. fewest replicas of any app, then the most CPU left;
//  6. the first in the order given (the choice is stable).
func PickNode(app string, ask Ask, nodes []Node, aff Affinity, rules Rules) (int, error) {
	best := -1
	var bestKey [6]float64
	var why []string
	for i, n := range nodes {
		if len(aff.Nodes) > 0 && !slices.Contains(aff.Nodes, n.Name) {
			continue
		}
		if ok, reason := n.fits(ask); !ok {
			why = append(why, reason)
			continue
		}
		prefer := 1.0
		if slices.Contains(aff.Prefer, n.Name) {
			prefer = 0
		}
		key := [6]float64{float64(n.Apps[app]), float64(n.count(rules.Apart)), prefer, -float64(n.count(rules.With)),
			float64(n.total()), n.Placed.CPU - n.CPUs}
		if best < 0 || slices.Compare(key[:], bestKey[:]) < 0 {
			best, bestKey = i, key
		}
	}
	if best >= 0 {
		return best, nil
	}
	switch {
	case len(nodes) == 0:
		return -1, fmt.Errorf("app %q: no live node takes new replicas", app)
	case len(why) == 0:
		return -1, fmt.Errorf("app %q: none of the nodes in [placement] nodes (%s) is live and takes new replicas",
			app, strings.Join(aff.Nodes, ", "))
	}
	return -1, fmt.Errorf("app %q: no node has room for a replica that asks %g CPUs and %d bytes: %s",
		app, ask.CPU, ask.Memory, strings.Join(why, "; "))
}
