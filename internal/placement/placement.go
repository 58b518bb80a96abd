// Package placement decides where a replica runs. On one host it picks the
// CPU a small replica is pinned to (its cpuset), so that the replicas of an
// app spread over the host's CPUs and no CPU carries more pinned replicas
// than it must; in a cluster the same choice, over nodes instead of CPUs,
// picks a replica's node.
//
// The choice itself is Pick, a pure function of the request, the slots (the
// CPUs or nodes with what they already hold) and the app's Rules: its
// co-location and anti-colocation hooks. CPUs keeps the state of one host's
// CPUs for Pick and is safe for concurrent use.
package placement

import (
	"slices"
)

// Request is one replica to place.
type Request struct {
	// ID is the replica's id; App is its app.
	ID  string
	App string
	// MaxCPU is the most CPU the replica may ever use, in cores (the app's
	// max_cpu; 0: no limit).
	MaxCPU float64
}

// Rules are an app's placement hooks. Replicas of one app always keep apart
// where they can (a CPU or node that fails takes as few of them as
// possible); Rules add other apps to keep away from, or to sit with.
type Rules struct {
	// Apart names apps whose replicas this app's replicas avoid
	// (anti-colocation: noisy neighbours, or two halves of a pair).
	Apart []string
	// With names apps whose replicas this app's replicas join
	// (co-location: a cache next to its users, a sidecar's app).
	With []string
}

// RulesFunc returns the rules of an app. Nil means no rules for any app.
type RulesFunc func(app string) Rules

// Slot is a place a replica can go: one CPU of a host, or one node of a
// cluster.
type Slot struct {
	// Name is the CPU number or the node's name.
	Name string
	// Apps counts the replicas the slot holds, by app.
	Apps map[string]int
}

// total is how many replicas the slot holds.
func (s Slot) total() int {
	n := 0
	for _, c := range s.Apps {
		n += c
	}
	return n
}

// count is how many replicas of apps the slot holds.
func (s Slot) count(apps []string) int {
	n := 0
	for _, a := range apps {
		n += s.Apps[a]
	}
	return n
}

// Pick returns the index of the slot where a replica of app goes, or -1
// when there is no slot. Slots are compared in this order, each deciding
// only between slots the ones before it leave equal:
//
//  1. fewest replicas of app itself (an app's replicas spread out);
//  2. fewest replicas of the apps in rules.Apart;
//  3. most replicas of the apps in rules.With;
//  4. fewest replicas of any app (the load evens out);
//  5. the first in the order given (the choice is stable).
//
// Spreading an app comes before co-location: a With rule never stacks an
// app's own replicas on one slot while another is free of them.
func Pick(app string, slots []Slot, rules Rules) int {
	best := -1
	var bestKey [4]int
	for i, s := range slots {
		key := [4]int{s.Apps[app], s.count(rules.Apart), -s.count(rules.With), s.total()}
		if best < 0 || slices.Compare(key[:], bestKey[:]) < 0 {
			best, bestKey = i, key
		}
	}
	return best
}
