package jobs

import (
	"context"
	"encoding/json"
	"errors"
	"slices"
	"sync"
	"testing"

	"github.com/shoal-run/shoal/internal/api/types"
	"github.com/shoal-run/shoal/internal/errdefs"
	"github.com/shoal-run/shoal/internal/store"
)

// slowStore holds the first write of each job until told, failing it if
// fail is set, and records the states of the writes that went through.
type slowStore struct {
	store.Store
	mu     sync.Mutex
	seen   map[string]bool
	hold   chan struct{}
	fail   bool
	states []string
}

func (s *slowStore) Put(ctx context.Context, key string, value []byte, opts ...store.PutOption) (int64, error) {
	s.mu.Lock()
	first := !s.seen[key]
	s.seen[key] = true
	s.mu.Unlock()
	if first {
		<-s.hold
		if s.fail {
			return 0, errors.New("disk full")
		}
	}
	var r record
	json.Unmarshal(value, &r)
	s.mu.Lock()
	s.states = append(s.states, r.Job.State)
	s.mu.Unlock()
	return s.Store.Put(ctx, key, value, opts...)
}

// TestSubmitOneStartsWhileStored: a job submitted alone to a free slot
// starts while its submission is being written, is answered only once it
// is stored, and its submission is stored as its start (one write), its
// end after it.
func TestSubmitOneStartsWhileStored(t *testing.T) {
	st := &slowStore{Store: openStore(t), seen: map[string]bool{}, hold: make(chan struct{})}
	r := newFakeRunner(true)
	m := openManager(t, Options{Store: st, Runner: r, Slots: 1})
	defer m.Close()
	submitted := make(chan []Job, 1)
	go func() {
		js, err := m.Submit(context.Background(), []types.JobRequest{hello("a")})
		if err != nil {
			t.Error(err)
		}
		submitted <- js
	}()
	id := r.waitStart(t)
	select {
	case <-submitted:
		t.Fatal("Submit returned before the submission was stored")
	default:
	}
	close(st.hold)
	js := <-submitted
	if len(js) != 1 || js[0].ID != id || js[0].State != Queued {
		t.Fatalf("submitted %+v, started %s", js, id)
	}
	r.finish(id)
	if j, err := m.Wait(context.Background(), id); err != nil || j.State != Done {
		t.Fatalf("job %s: %+v %v", id, j, err)
	}
	st.mu.Lock()
	defer st.mu.Unlock()
	if want := []string{Running, Done}; !slices.Equal(st.states, want) {
		t.Fatalf("stored states %v, want %v", st.states, want)
	}
}

// TestSubmitOneQueuedStoresStartLater: a job submitted alone while the
// only slot is taken is stored queued, and its start and end once it runs.
func TestSubmitOneQueuedStoresStartLater(t *testing.T) {
	st := &slowStore{Store: openStore(t), seen: map[string]bool{}, hold: make(chan struct{})}
	close(st.hold)
	r := newFakeRunner(true)
	m := openManager(t, Options{Store: st, Runner: r, Slots: 1})
	defer m.Close()
	first, err := m.Submit(context.Background(), []types.JobRequest{hello("a")})
	if err != nil {
		t.Fatal(err)
	}
	r.waitStart(t)
	second, err := m.Submit(context.Background(), []types.JobRequest{hello("a")})
	if err != nil {
		t.Fatal(err)
	}
	if rec := stored(t, st, second[0].ID); rec.Job.State != Queued || rec.Job.Attempts != 0 || rec.Req == nil {
		t.Fatalf("waiting job stored as %s, attempt %d, request %v; want queued with its request", rec.Job.State, rec.Job.Attempts, rec.Req != nil)
	}
	r.finish(first[0].ID)
	if got := r.waitStart(t); got != second[0].ID {
		t.Fatalf("started %s, want %s", got, second[0].ID)
	}
	r.finish(second[0].ID)
	if j, err := m.Wait(context.Background(), second[0].ID); err != nil || j.State != Done {
		t.Fatalf("job %s: %+v %v", second[0].ID, j, err)
	}
	st.mu.Lock()
	defer st.mu.Unlock()
	// The first job's start and end, then the second's submission, start
	// and end (the first's end and the second's start in either order).
	var states []string
	for _, s := range st.states {
		if s != Done {
			states = append(states, s)
		}
	}
	if want := []string{Running, Queued, Running}; !slices.Equal(states, want) || len(st.states) != 5 {
		t.Fatalf("stored states %v, want %v and two ends", st.states, want)
	}
}

// TestSubmitOneStartStoredSurvivesCrash: a job whose submission was
// stored as its start, lost in a crash before its end, runs again as its
// second attempt with its request.
func TestSubmitOneStartStoredSurvivesCrash(t *testing.T) {
	st := openStore(t)
	r1 := newFakeRunner(true)
	m1 := openManager(t, Options{Store: st, Runner: r1, Slots: 1, MaxAttempts: 3})
	js, err := m1.Submit(context.Background(), []types.JobRequest{hello("a")})
	if err != nil {
		t.Fatal(err)
	}
	id := r1.waitStart(t)
	// Stored when Submit returned: no wait for a later write.
	if rec := stored(t, st, id); rec.Job.State != Running || rec.Job.Attempts != 1 || rec.Job.Started == nil || rec.Req == nil {
		t.Fatalf("stored at submission: state %s attempt %d started %v request %v; want running, attempt 1, with its request",
			rec.Job.State, rec.Job.Attempts, rec.Job.Started, rec.Req != nil)
	}
	// m1 is abandoned as if its process died; its runner never returns.
	r2 := newFakeRunner(false)
	m2 := openManager(t, Options{Store: st, Runner: r2, Slots: 1, MaxAttempts: 3})
	defer m2.Close()
	got, err := m2.Wait(context.Background(), js[0].ID)
	if err != nil {
		t.Fatal(err)
	}
	if got.State != Done || got.Attempts != 2 || got.Steps[0].Stdout != "ran "+id {
		t.Fatalf("after the crash: %+v, want done in its second attempt", got)
	}
}

// TestSubmitOneNotStored: a job whose submission cannot be stored is
// killed though it started, the caller gets the error, and nothing of it
// is stored or kept.
func TestSubmitOneNotStored(t *testing.T) {
	st := &slowStore{Store: openStore(t), seen: map[string]bool{}, hold: make(chan struct{}), fail: true}
	r := newFakeRunner(true)
	m := openManager(t, Options{Store: st, Runner: r, Slots: 1})
	done := make(chan error, 1)
	go func() {
		_, err := m.Submit(context.Background(), []types.JobRequest{hello("a")})
		done <- err
	}()
	id := r.waitStart(t)
	close(st.hold)
	if err := <-done; err == nil {
		t.Fatal("Submit: no error though the submission was not stored")
	}
	m.Close() // waits for the killed job's end
	if kvs, _ := st.List(context.Background(), store.JobsPrefix); len(kvs) != 0 {
		t.Fatalf("%d records stored of a job whose submission failed", len(kvs))
	}
	if _, err := m.Get(context.Background(), id); !errdefs.IsNotFound(err) {
		t.Fatalf("job %s kept: %v", id, err)
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	if len(m.live) != 0 || m.free != 1 {
		t.Fatalf("left %d live jobs, %d free slots", len(m.live), m.free)
	}
}
