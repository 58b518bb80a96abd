package group

import (
	"sync/atomic"
	"testing"
	"time"
)

// The lead's group may be added to from zero while its end waits: a
// goroutine it does not count (a drain ending) starts one it does (a
// route's publication). A sync.WaitGroup panics so, "reused before
// previous Wait has returned", as TestDrainStoredBeforeRoute once did;
// the group waits for the new work, or returned before it was added.
func TestGroupAddedFromZeroWhileWaiting(t *testing.T) {
	for range 300 {
		var g Group
		g.Add(1)
		go func() {
			time.Sleep(50 * time.Microsecond) // Wait is likely blocked by now
			g.Done()                          // zero: Wait wakes
			g.Add(1)                          // and work is added before it returned
			time.Sleep(50 * time.Microsecond)
			g.Done()
		}()
		g.Wait()
	}
}

// Wait returns once every counted goroutine is done.
func TestGroupWaitsForAll(t *testing.T) {
	var g Group
	var done atomic.Int32
	g.Add(3)
	for range 3 {
		go func() {
			time.Sleep(time.Millisecond)
			done.Add(1)
			g.Done()
		}()
	}
	g.Wait()
	if n := done.Load(); n != 3 {
		t.Fatalf("Wait returned with %d of 3 goroutines done", n)
	}
}
