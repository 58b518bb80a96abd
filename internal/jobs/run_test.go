package jobs

import (
	"context"
	"errors"
	"slices"
	"testing"

	"github.com/shoal-run/shoal/internal/api/types"
	"github.com/shoal-run/shoal/internal/errdefs"
	"github.com/shoal-run/shoal/internal/store"
)

// runAsync calls m.Run in a goroutine; the channel gets its answer.
func runAsync(m *Manager, req types.JobRequest) <-chan Job {
	out := make(chan Job, 1)
	go func() {
		j, err := m.Run(context.Background(), req)
		if err != nil {
			j.Error = "Run: " + err.Error()
		}
		out <- j
	}()
	return out
}

// TestRunStoresOnlyTheEnd: a job run to a free slot, its caller waiting,
// is stored once, at its end; while it runs it is seen by Get and List.
func TestRunStoresOnlyTheEnd(t *testing.T) {
	st := &slowStore{Store: openStore(t), seen: map[string]bool{}, hold: make(chan struct{})}
	close(st.hold)
	r := newFakeRunner(true)
	m := openManager(t, Options{Store: st, Runner: r, Slots: 1})
	defer m.Close()
	ran := runAsync(m, hello("a"))
	id := r.waitStart(t)
	if _, err := st.Get(context.Background(), store.JobKey(id)); !errdefs.IsNotFound(err) {
		t.Fatalf("job %s stored while it runs for a waiting caller: %v", id, err)
	}
	if j, err := m.Get(context.Background(), id); err != nil || j.State != Running {
		t.Fatalf("Get of the running job: %+v %v", j, err)
	}
	list, err := m.List(context.Background(), types.JobFilter{State: Running})
	if err != nil || len(list) != 1 || list[0].ID != id {
		t.Fatalf("List of running jobs: %+v %v, want %s", list, err, id)
	}
	r.finish(id)
	j := <-ran
	if j.ID != id || j.State != Done || !j.OK || j.Attempts != 1 {
		t.Fatalf("Run answered %+v", j)
	}
	if rec := stored(t, st, id); rec.Job.State != Done || rec.Req != nil {
		t.Fatalf("stored %s with request %v, want done without it", rec.Job.State, rec.Req != nil)
	}
	st.mu.Lock()
	defer st.mu.Unlock()
	if want := []string{Done}; !slices.Equal(st.states, want) {
		t.Fatalf("stored states %v, want %v", st.states, want)
	}
}

// TestRunCrashLosesTheUntoldJob: a job run for a waiting caller is not
// stored before its end, so after a crash it is neither known nor run
// again: the caller, whose request failed, was told nothing of it.
func TestRunCrashLosesTheUntoldJob(t *testing.T) {
	st := openStore(t)
	r1 := newFakeRunner(true)
	m1 := openManager(t, Options{Store: st, Runner: r1, Slots: 1})
	runAsync(m1, hello("a"))
	id := r1.waitStart(t)
	// m1 is abandoned as if its process died; its runner never returns.
	r2 := newFakeRunner(false)
	m2 := openManager(t, Options{Store: st, Runner: r2, Slots: 1})
	defer m2.Close()
	if j, err := m2.Get(context.Background(), id); !errdefs.IsNotFound(err) {
		t.Fatalf("job %s after the crash: %+v %v, want not found", id, j, err)
	}
	if len(r2.started) != 0 {
		t.Fatalf("jobs run after the crash: %v", r2.started)
	}
}

// TestRunQueuedOrCalledBackIsStored: a job run for a waiting caller is
// stored before its end as Submit stores it when it must wait for a slot
// (queued, then started) or has a callback (stored as started), so a
// crash loses neither.
func TestRunQueuedOrCalledBackIsStored(t *testing.T) {
	st := &slowStore{Store: openStore(t), seen: map[string]bool{}, hold: make(chan struct{})}
	close(st.hold)
	r := newFakeRunner(true)
	m := openManager(t, Options{Store: st, Runner: r, Slots: 1})
	defer m.Close()
	withCallback := hello("a")
	withCallback.Callback = "http://127.0.0.1:9/done"
	first := runAsync(m, withCallback)
	firstID := r.waitStart(t)
	waitFor(t, "the job with a callback stored", func() bool {
		_, err := st.Get(context.Background(), store.JobKey(firstID))
		return err == nil
	})
	if rec := stored(t, st, firstID); rec.Job.State != Running || rec.Req == nil {
		t.Fatalf("job with a callback stored as %s, request %v; want running with its request", rec.Job.State, rec.Req != nil)
	}
	second := runAsync(m, hello("a"))
	waitFor(t, "the waiting job stored", func() bool {
		kvs, _ := st.List(context.Background(), store.JobsPrefix)
		return len(kvs) == 2
	})
	r.finish(firstID)
	secondID := r.waitStart(t)
	r.finish(secondID)
	if j := <-first; j.State != Done {
		t.Fatalf("first: %+v", j)
	}
	if j := <-second; j.ID != secondID || j.State != Done {
		t.Fatalf("second: %+v", j)
	}
	st.mu.Lock()
	defer st.mu.Unlock()
	// The first job's start, the second's submission (queued), then the
	// first's end, the second's start and its end (the first's end and
	// the second's start in either order).
	if len(st.states) != 5 || st.states[0] != Running || st.states[1] != Queued || st.states[4] != Done ||
		!slices.Contains(st.states[2:4], Running) || !slices.Contains(st.states[2:4], Done) {
		t.Fatalf("stored states %v", st.states)
	}
}

// TestRunAtCloseIsKeptForTheNextDaemon: a job run for a waiting caller
// that is still running when the daemon stops is stored queued, with its
// request, and its caller told the daemon is stopping.
func TestRunAtCloseIsKeptForTheNextDaemon(t *testing.T) {
	st := openStore(t)
	r := newFakeRunner(true)
	m := openManager(t, Options{Store: st, Runner: r, Slots: 1})
	ran := runAsync(m, hello("a"))
	id := r.waitStart(t)
	m.Close()
	j := <-ran
	if j.ID != id || j.State != Queued || j.Error == "" {
		t.Fatalf("Run at Close answered %+v, want the job queued and an error", j)
	}
	rec := stored(t, st, id)
	if rec.Job.State != Queued || rec.Req == nil {
		t.Fatalf("stored at Close: %s, request %v; want queued with its request", rec.Job.State, rec.Req != nil)
	}
	m2 := openManager(t, Options{Store: st, Runner: newFakeRunner(false), Slots: 1})
	defer m2.Close()
	if j, err := m2.Wait(context.Background(), id); err != nil || j.State != Done {
		t.Fatalf("after restart: %+v %v", j, err)
	}
}

// TestRunInvalid: a bad request is refused as Submit refuses it, nothing
// stored.
func TestRunInvalid(t *testing.T) {
	st := openStore(t)
	m := openManager(t, Options{Store: st, Runner: newFakeRunner(false), Slots: 1})
	defer m.Close()
	bad := hello("a")
	bad.Steps = nil
	if _, err := m.Run(context.Background(), bad); !errors.Is(err, errdefs.ErrInvalid) {
		t.Fatalf("Run without steps: %v, want invalid", err)
	}
	if kvs, _ := st.List(context.Background(), store.JobsPrefix); len(kvs) != 0 {
		t.Fatalf("%d records stored of an invalid job", len(kvs))
	}
}
