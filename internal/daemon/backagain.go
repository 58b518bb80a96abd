package daemon

import (
	"time"

	"github.com/shoal-run/shoal/internal/cluster"
)

// backAgain returns a heartbeat observer that calls back, in a goroutine
// of its own, with the time of the first good step after a step that
// found the node's key dropped (the node was down for the others).
func backAgain(back func(at time.Time)) func(cluster.Status) {
	lost := false
	return func(s cluster.Status) {
		switch {
		case s.Lost:
			lost = true
		case s.Alive && lost:
			lost = false
			go back(time.Now())
		}
	}
}
