package serving

import (
	"fmt"
	"strings"
)

// State is where a replica stands on the homeostasis ladder (DESIGN.md,
// "States of a replica"). A replica's record lists it as one of the
// listed states; the others are steps under way that list as the state
// they come from or lead to (see listed).
type State string

// The states a record lists, and the API shows.
const (
	StatePending  State = "pending"  // made; its container is being started
	StateStarting State = "starting" // its container runs; not yet healthy
	StateReady    State = "ready"    // serving
	StateFrozen   State = "frozen"   // its cgroup frozen; a request thaws it
	StateDraining State = "draining" // no new request; stopped once in-flight ones finish
	// StateHalted is a replica out of the route at its own request (the
	// self API's halt): it keeps running, takes no new request and is not
	// counted as serving, until it dies or its app goes.
	StateHalted  State = "halted"
	StateStopped State = "stopped" // being stopped, then removed
	StateFailed  State = "failed"  // crashed or never ready; being removed
)

// The states of a step under way, and of failed replicas once removed;
// a record never holds them.
const (
	StateFreezing   State = "freezing"   // ready, out of the route, being drained and frozen; listed ready
	StateThawing    State = "thawing"    // frozen, thawed once ctl.mu is released; listed frozen
	StateFailing    State = "failing"    // draining after failing its health checks; listed draining
	StateDead       State = "dead"       // failed and removed: listed (failed, with its reason) until one of the app is ready
	StateSuperseded State = "superseded" // failed, still being removed, and one of the app was ready since: forgotten once removed
	StateGone       State = "gone"       // forgotten: out of the app's replicas, its record deleted
)

// stateNew is where a replica is before its first move (start or adopt).
const stateNew State = "-"

// listed is the state a record of a replica in state s lists.
func (s State) listed() State {
	switch s {
	case StateFreezing:
		return StateReady
	case StateThawing:
		return StateFrozen
	case StateFailing:
		return StateDraining
	case StateDead, StateSuperseded:
		return StateFailed
	case StateGone:
		return StateStopped
	}
	return s
}

// exiting reports whether a replica in state s is on its way out: its
// exit is expected, it serves no more and no other move takes it back.
func (s State) exiting() bool {
	switch s {
	case StateDraining, StateFailing, StateStopped, StateFailed, StateDead, StateSuperseded, StateGone:
		return true
	}
	return false
}

// booting reports whether a replica in state s is being started: the
// route counts it (route.Route.Starting).
func (s State) booting() bool { return s == StatePending || s == StateStarting }

// move is what takes a replica from one state to another.
type move string

const (
	mvStart      move = "start"       // the controller adds a replica
	mvAdopt      move = "adopt"       // a restarted controller finds it (in the state its record and node say)
	mvBoot       move = "boot"        // the node started its container
	mvReady      move = "ready"       // it passed its first health check
	mvAdopted    move = "adopted"     // adopted and running, it answers its health check
	mvUnanswered move = "unanswered"  // adopted as ready, it does not answer at once: it starts over
	mvFreeze     move = "freeze"      // idle or scaled in
	mvFrozen     move = "frozen"      // its freeze is done
	mvUnfrozen   move = "unfrozen"    // its freeze failed: it stays ready
	mvThaw       move = "thaw"        // needed to serve
	mvThawed     move = "thawed"      // its thaw is done
	mvHalt       move = "halt"        // it asked to be halted (self API)
	mvDrain      move = "drain"       // replaced, asked to die, or its node does not answer
	mvFailChecks move = "fail checks" // it failed its health checks
	mvStop       move = "stop"        // it takes no traffic and does nothing: stopped at once
	mvFail       move = "fail"        // it crashed, or never became ready
	mvExit       move = "exit"        // it stopped
	mvExitFailed move = "exit failed" // it stopped after failing its checks, and none of the app was ready since
	mvSupersede  move = "supersede"   // another of the app became ready
	mvRemove     move = "remove"      // its container and address are gone
	mvForget     move = "forget"      // another failed replica, or a ready one, takes its place in the list
	mvDelete     move = "delete"      // its app is deleted
	mvLose       move = "lose"        // its node is lost
)

// step is one row of the ladder: move mv takes a replica in any state of
// from to state to, and emits event (none when "").
type step struct {
	from  []State
	mv    move
	to    State
	event string
}

// live are the states of a replica that is not on its way out.
var live = []State{StatePending, StateStarting, StateReady, StateFreezing, StateFrozen, StateThawing, StateHalted}

// running are the states of a replica that has served and not yet left.
var running = []State{StateReady, StateFreezing, StateFrozen, StateThawing, StateHalted}

// ladder is every move a replica can make. DESIGN.md's table of the
// ladder is this table (TestLadderTableMatchesDesign).
var ladder = []step{
	{[]State{stateNew}, mvStart, StatePending, "start"},
	{[]State{StatePending}, mvBoot, StateStarting, ""},
	{[]State{StateStarting}, mvReady, StateReady, "ready"},
	{[]State{StateStarting, StateReady}, mvAdopted, StateReady, "adopt"},
	{[]State{StateReady}, mvUnanswered, StateStarting, ""},
	{[]State{StateReady}, mvFreeze, StateFreezing, ""},
	{[]State{StateFreezing}, mvFrozen, StateFrozen, "freeze"},
	{[]State{StateFreezing}, mvUnfrozen, StateReady, ""},
	{[]State{StateFrozen}, mvThaw, StateThawing, ""},
	{[]State{StateThawing}, mvThawed, StateReady, "thaw"},
	{[]State{StateReady}, mvHalt, StateHalted, ""},
	{running, mvDrain, StateDraining, "drain"},
	{running, mvFailChecks, StateFailing, "fail"},
	{[]State{StatePending, StateStarting, StateFrozen, StateThawing}, mvStop, StateStopped, "stop"},
	{live, mvFail, StateFailed, "fail"},
	{[]State{StateDraining, StateFailing, StateStopped}, mvExit, StateStopped, ""},
	{[]State{StateFailing}, mvExitFailed, StateFailed, ""},
	{[]State{StateFailed}, mvSupersede, StateSuperseded, ""},
	{[]State{StateFailed}, mvRemove, StateDead, ""},
	{[]State{StatePending, StateStarting, StateStopped, StateSuperseded, StateGone}, mvRemove, StateGone, ""},
	{[]State{StateDead}, mvForget, StateGone, ""},
	{append(append([]State{}, live...), StateDraining, StateFailing, StateStopped, StateFailed, StateDead, StateSuperseded), mvDelete, StateStopped, ""},
	{append(append([]State{}, live...), StateDraining, StateFailing, StateStopped, StateFailed, StateDead, StateSuperseded), mvLose, StateGone, "lost"},
}

// adoptable are the states a restarted controller adopts a replica in
// (adoptAs): the one its record and its node say it is in. The ladder's
// table in DESIGN.md lists them as one row, move adopt from -.
var adoptable = []State{StateStarting, StateReady, StateFrozen, StateHalted, StateDraining, StateStopped, StateFailed}

// edge is a state and a move from it.
type edge struct {
	from State
	mv   move
}

// moves indexes ladder: the step each move takes from each state.
var moves = func() map[edge]step {
	out := map[edge]step{}
	for _, s := range ladder {
		for _, f := range s.from {
			e := edge{f, s.mv}
			if _, dup := out[e]; dup {
				panic(fmt.Sprintf("serving: the ladder has two moves %q from %s", s.mv, f))
			}
			out[e] = s
		}
	}
	return out
}()

// canAdopt reports whether a replica can be adopted in state s.
func canAdopt(s State) bool {
	for _, a := range adoptable {
		if a == s {
			return true
		}
	}
	return false
}

// move moves replica r by mv, when the ladder allows mv from r's state;
// it reports whether it did. The record lists the new state (and is
// queued for the writer when that changed); a replica gone leaves the
// app's replicas and its record is deleted; mv's event, if it has one, is
// emitted with why and inputs. A move to ready routes the replica
// (closed is cleared). ctl.mu is held.
func (ctl *appCtl) move(r *replica, mv move, why string, inputs map[string]float64) bool {
	s, ok := moves[edge{r.state, mv}]
	if !ok {
		return false
	}
	ctl.enter(r, s.to)
	if s.event != "" {
		ctl.m.emit(s.event, ctl.name, r.rec.ID, why, inputs)
	}
	return true
}

// adoptAs puts a replica a restarted controller found in state s, one
// of adoptable: it is out of the route until its health check passes.
// ctl.mu is held.
func (ctl *appCtl) adoptAs(r *replica, s State) {
	if r.state != stateNew || !canAdopt(s) {
		panic(fmt.Sprintf("serving: replica %s adopted as %s from %s", r.rec.ID, s, r.state))
	}
	ctl.enter(r, s)
	r.closed = true
}

// enter puts r in state to. ctl.mu is held.
func (ctl *appCtl) enter(r *replica, to State) {
	id := r.rec.ID
	if to == StateReady {
		r.closed = false
	}
	// The route counts the replicas being started (route.Starting).
	switch {
	case to.booting() && !r.state.booting():
		ctl.routeSoon = true
	case r.state.booting() && !to.booting():
		ctl.publish()
	}
	r.state = to
	if to == StateGone {
		delete(ctl.reps, id)
		ctl.markDirty(id)
		return
	}
	if l := to.listed(); r.rec.State != l {
		r.rec.State = l
		ctl.markDirty(id)
	}
}

// ladderTable is the ladder as a markdown table, one row per step, as
// DESIGN.md has it.
func ladderTable() string {
	var b strings.Builder
	b.WriteString("| from | move | to | event |\n|---|---|---|---|\n")
	for _, s := range ladder {
		from := make([]string, len(s.from))
		for i, f := range s.from {
			from[i] = string(f)
		}
		ev := s.event
		if ev == "" {
			ev = "-"
		}
		fmt.Fprintf(&b, "| %s | %s | %s | %s |\n", strings.Join(from, ", "), s.mv, s.to, ev)
		if s.mv == mvStart {
			to := make([]string, len(adoptable))
			for i, a := range adoptable {
				to[i] = string(a)
			}
			fmt.Fprintf(&b, "| %s | %s | %s | - |\n", stateNew, mvAdopt, strings.Join(to, ", "))
		}
	}
	return b.String()
}
