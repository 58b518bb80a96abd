package containers

import (
	"testing"
	"time"
)

// A run whose client's server closed at the daemon's stop may end, and
// add its network release, while Drain waits and the count has just come
// to zero. A sync.WaitGroup panics so ("reused before previous Wait has
// returned"); Drain waits for the new work or returned before it came.
func TestDrainWhileARunAddsARelease(t *testing.T) {
	for range 300 {
		var s Service
		s.pending.Add(1) // a release under way
		go func() {
			time.Sleep(50 * time.Microsecond) // Drain is likely waiting by now
			s.pending.Done()                  // zero: Drain wakes
			s.pending.Add(1)                  // and a run adds its release
			time.Sleep(50 * time.Microsecond)
			s.pending.Done()
		}()
		s.Drain()
	}
}
