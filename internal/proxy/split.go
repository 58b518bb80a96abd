package proxy

import (
	"math/rand/v2"
	"slices"
)

// split is how a route's requests are spread over its revisions. It is
// worked out once when the route is set, so that a request pays for one
// random draw and a short scan when the route is split, and for nothing
// when it is not.
type split struct {
	// base is where a request chooses when the route is not split between
	// revisions: every endpoint, or those of the one revision with weight.
	base []*endpoint
	// groups are the revisions with weight > 0 and at least one endpoint,
	// when there are two or more; nil otherwise.
	groups []revGroup
	total  int // sum of the groups' weights
}

// revGroup is one revision's endpoints and the cumulative weight of the
// groups up to and including it.
type revGroup struct {
	eps []*endpoint
	cum int
}

// newSplit groups eps (of revisions revs, index by index) by revision under
// weights. Without weights, or when no revision with weight > 0 has an
// endpoint, every endpoint is a candidate.
func newSplit(eps []*endpoint, revs []int, weights map[int]int) split {
	s := split{base: eps}
	if len(weights) == 0 {
		return s
	}
	byRev := map[int][]*endpoint{}
	for i, e := range eps {
		if weights[revs[i]] > 0 {
			byRev[revs[i]] = append(byRev[revs[i]], e)
		}
	}
	if len(byRev) == 0 {
		return s
	}
	order := make([]int, 0, len(byRev))
	for rev := range byRev {
		order = append(order, rev)
	}
	slices.Sort(order)
	if len(order) == 1 {
		s.base = byRev[order[0]]
		return s
	}
	s.base = nil
	for _, rev := range order {
		s.total += weights[rev]
		s.groups = append(s.groups, revGroup{eps: byRev[rev], cum: s.total})
	}
	return s
}

// candidates returns the endpoints a request chooses among: those of a
// revision drawn by weight when the route is split. The unsplit case
// inlines into the caller.
func (s *split) candidates() []*endpoint {
	if s.groups == nil {
		return s.base
	}
	return s.draw()
}

// draw returns the endpoints of a revision drawn by weight.
func (s *split) draw() []*endpoint {
	x := rand.IntN(s.total)
	for i := range s.groups {
		if x < s.groups[i].cum {
			return s.groups[i].eps
		}
	}
	return s.groups[len(s.groups)-1].eps
}
