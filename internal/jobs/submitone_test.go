package jobs

import (
	"context"
	"encoding/json"
	"errors"
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
// is stored, and its start and end are stored after it.
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
	if want := []string{Queued, Running, Done}; len(st.states) != 3 || st.states[0] != want[0] || st.states[1] != want[1] || st.states[2] != want[2] {
		t.Fatalf("stored states %v, want %v", st.states, want)
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
