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
	// revisions: every endpoint, or those of the one revision with weight;
	// only this node's of them when baseFar holds the others.
	base    []*endpoint
	baseFar []*endpoint
	// groups are the revisions with weight > 0 and at least one endpoint,
	// when there are two or more; nil otherwise.
	groups []revGroup
	total  int // sum of the groups' weights
}

// revGroup is one revision's endpoints and the cumulative weight of the
// groups up to and including it.
type revGroup struct {
	eps, far []*endpoint // near and far as in split.base
	cum      int
}

// near splits eps into this node's endpoints and other nodes' (reached
// through a hop) when it has both; otherwise far is nil.
func near(eps []*endpoint) (here, far []*endpoint) {
	n := 0
	for _, e := range eps {
		if e.node == "" {
			n++
		}
	}
	if n == 0 || n == len(eps) {
		return eps, nil
	}
	here = make([]*endpoint, 0, n)
	far = make([]*endpoint, 0, len(eps)-n)
	for _, e := range eps {
		if e.node == "" {
			here = append(here, e)
		} else {
			far = append(far, e)
		}
	}
	return here, far
}

// newSplit groups eps (of revisions revs, index by index) by revision under
// weights. Without weights, or when no revision with weight > 0 has an
// endpoint, every endpoint is a candidate.
func newSplit(eps []*endpoint, revs []int, weights map[int]int) split {
	s := split{}
	s.base, s.baseFar = near(eps)
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
		s.base, s.baseFar = near(byRev[order[0]])
		return s
	}
	s.base, s.baseFar = nil, nil
	for _, rev := range order {
		s.total += weights[rev]
		here, far := near(byRev[rev])
		s.groups = append(s.groups, revGroup{eps: here, far: far, cum: s.total})
	}
	return s
}

// candidates returns the endpoints a request chooses among: those of a
// revision drawn by weight when the route is split; this node's, and
// other nodes' in far when there are both. The unsplit case inlines into
// the caller.
func (s *split) candidates() (here, far []*endpoint) {
	if s.groups == nil {
		return s.base, s.baseFar
	}
	return s.draw()
}

// draw returns the endpoints of a revision drawn by weight.
func (s *split) draw() (here, far []*endpoint) {
	x := rand.IntN(s.total)
	for i := range s.groups {
		if x < s.groups[i].cum {
			return s.groups[i].eps, s.groups[i].far
		}
	}
	g := &s.groups[len(s.groups)-1]
	return g.eps, g.far
}
