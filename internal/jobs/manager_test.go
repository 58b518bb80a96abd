package jobs

import (
	"context"
	"encoding/json"
	"errors"
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/shoal-run/shoal/internal/api/types"
	"github.com/shoal-run/shoal/internal/clock"
	"github.com/shoal-run/shoal/internal/errdefs"
	"github.com/shoal-run/shoal/internal/store"
)

// fakeRunner is a pure-logic stand-in for the sandbox: it records which
// jobs started and ends each one when told to (or at once).
type fakeRunner struct {
	mu      sync.Mutex
	started []string
	block   bool
	// readyFirst makes Run call ready before it blocks (a result known,
	// clean-up left).
	readyFirst bool
	release    map[string]chan struct{}
	startCh    chan string
	images     map[string]string // job id → the image its plan names
}

func newFakeRunner(block bool) *fakeRunner {
	return &fakeRunner{block: block, release: map[string]chan struct{}{}, startCh: make(chan string, 1000), images: map[string]string{}}
}

func (f *fakeRunner) Run(ctx context.Context, j *Job, p *Plan, ready func()) error {
	f.mu.Lock()
	f.started = append(f.started, j.ID)
	f.images[j.ID] = p.Req.Image
	ch := make(chan struct{})
	f.release[j.ID] = ch
	f.mu.Unlock()
	f.startCh <- j.ID
	if f.readyFirst {
		j.Steps = []StepResult{{Status: StepOK}}
		ready()
	}
	if f.block {
		select {
		case <-ch:
		case <-ctx.Done():
			j.Steps = []StepResult{{Status: StepKilled}}
			return nil
		}
	}
	j.Steps = []StepResult{{Status: StepOK, Stdout: "ran " + j.ID}}
	return nil
}

func (f *fakeRunner) finish(id string) {
	f.mu.Lock()
	ch := f.release[id]
	f.mu.Unlock()
	close(ch)
}

func (f *fakeRunner) waitStart(t *testing.T) string {
	t.Helper()
	select {
	case id := <-f.startCh:
		return id
	case <-time.After(30 * time.Second):
		t.Fatal("no job started")
		return ""
	}
}

func openStore(t *testing.T) store.Store {
	t.Helper()
	st, err := store.OpenBolt(filepath.Join(t.TempDir(), "store.db"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { st.Close() })
	return st
}

func hello(tenant string) types.JobRequest {
	return types.JobRequest{Image: "busybox:1", Tenant: tenant, Steps: []types.JobStep{{Args: []string{"echo", "hi"}}}}
}

func openManager(t *testing.T, o Options) *Manager {
	t.Helper()
	if o.Clock == nil {
		o.Clock = clock.NewFake(time.Unix(1_000_000, 0))
	}
	m, err := Open(context.Background(), o)
	if err != nil {
		t.Fatal(err)
	}
	return m
}

func stored(t *testing.T, st store.Store, id string) record {
	t.Helper()
	kv, err := st.Get(context.Background(), store.JobKey(id))
	if err != nil {
		t.Fatalf("job %s: %v", id, err)
	}
	var r record
	if err := json.Unmarshal(kv.Value, &r); err != nil {
		t.Fatal(err)
	}
	return r
}

func TestSubmitRunsAndStores(t *testing.T) {
	st := openStore(t)
	m := openManager(t, Options{Store: st, Runner: newFakeRunner(false), Slots: 2})
	defer m.Close()
	js, err := m.Submit(context.Background(), []types.JobRequest{hello("a"), hello("b")})
	if err != nil {
		t.Fatal(err)
	}
	for _, j := range js {
		got, err := m.Wait(context.Background(), j.ID)
		if err != nil {
			t.Fatal(err)
		}
		if got.State != Done || !got.OK || got.Attempts != 1 || got.Steps[0].Stdout != "ran "+j.ID {
			t.Fatalf("job %s: %+v", j.ID, got)
		}
		if r := stored(t, st, j.ID); r.Job.State != Done || r.Req != nil {
			t.Fatalf("stored %s: state %s, request kept %v", j.ID, r.Job.State, r.Req != nil)
		}
	}
	list, err := m.List(context.Background(), types.JobFilter{Tenant: "a"})
	if err != nil || len(list) != 1 || list[0].Tenant != "a" {
		t.Fatalf("list tenant a: %v %v", list, err)
	}
}

// TestCrashLosesNoJob stops a manager without Close (a crash) while one
// job runs and two wait; the next manager runs all three, the interrupted
// one as its second attempt.
func TestCrashLosesNoJob(t *testing.T) {
	st := openStore(t)
	r1 := newFakeRunner(true)
	m1 := openManager(t, Options{Store: st, Runner: r1, Slots: 1})
	js, err := m1.Submit(context.Background(), []types.JobRequest{hello("a"), hello("a"), hello("a")})
	if err != nil {
		t.Fatal(err)
	}
	running := r1.waitStart(t)
	waitFor(t, "the start stored", func() bool { return stored(t, st, running).Job.State == Running })
	// m1 is abandoned as if its process died; its runner never returns.
	r2 := newFakeRunner(false)
	m2 := openManager(t, Options{Store: st, Runner: r2, Slots: 1})
	defer m2.Close()
	for _, j := range js {
		got, err := m2.Wait(context.Background(), j.ID)
		if err != nil {
			t.Fatal(err)
		}
		want := 1
		if j.ID == running {
			want = 2
		}
		if got.State != Done || got.Attempts != want {
			t.Fatalf("job %s after restart: state %s attempts %d, want done after %d", j.ID, got.State, got.Attempts, want)
		}
	}
	// The interrupted job ran first again: it kept its place.
	if r2.started[0] != running {
		t.Fatalf("restart order %v, want %s first", r2.started, running)
	}
}

// TestCrashTwiceFails marks a job that was running in both of its attempts
// as failed, with the reason, instead of running it forever.
func TestCrashTwiceFails(t *testing.T) {
	st := openStore(t)
	var id string
	for attempt := 1; attempt <= 2; attempt++ {
		r := newFakeRunner(true)
		m := openManager(t, Options{Store: st, Runner: r, Slots: 1, MaxAttempts: 2})
		if attempt == 1 {
			js, err := m.Submit(context.Background(), []types.JobRequest{hello("a")})
			if err != nil {
				t.Fatal(err)
			}
			id = js[0].ID
		}
		if got := r.waitStart(t); got != id {
			t.Fatalf("attempt %d started %s, want %s", attempt, got, id)
		}
		waitFor(t, "the start stored", func() bool {
			j := stored(t, st, id).Job
			return j.State == Running && j.Attempts == attempt
		})
	}
	m := openManager(t, Options{Store: st, Runner: newFakeRunner(false), Slots: 1, MaxAttempts: 2})
	defer m.Close()
	got, err := m.Get(context.Background(), id)
	if err != nil {
		t.Fatal(err)
	}
	if got.State != Failed || got.Error == "" || got.Attempts != 2 {
		t.Fatalf("after two lost attempts: %+v, want failed with a reason", got)
	}
}

// TestReadyAnswersBeforeCleanup: a job is answered when the runner says
// its result is ready, and its slot is free only once the runner returns.
func TestReadyAnswersBeforeCleanup(t *testing.T) {
	st := openStore(t)
	r := newFakeRunner(true)
	r.readyFirst = true
	m := openManager(t, Options{Store: st, Runner: r, Slots: 1})
	defer m.Close()
	js, err := m.Submit(context.Background(), []types.JobRequest{hello("a"), hello("a")})
	if err != nil {
		t.Fatal(err)
	}
	first := r.waitStart(t)
	j, err := m.Wait(context.Background(), first)
	if err != nil || j.State != Done || !j.OK {
		t.Fatalf("first job while its runner cleans up: %+v %v", j, err)
	}
	select {
	case id := <-r.startCh:
		t.Fatalf("job %s started while the first still held the only slot", id)
	default:
	}
	r.finish(first)
	second := r.waitStart(t)
	if second == first || (second != js[0].ID && second != js[1].ID) {
		t.Fatalf("second start %s", second)
	}
	r.finish(second)
}

func TestCloseRequeuesRunning(t *testing.T) {
	st := openStore(t)
	r := newFakeRunner(true)
	m := openManager(t, Options{Store: st, Runner: r, Slots: 1})
	js, err := m.Submit(context.Background(), []types.JobRequest{hello("a")})
	if err != nil {
		t.Fatal(err)
	}
	r.waitStart(t)
	m.Close()
	rec := stored(t, st, js[0].ID)
	if rec.Job.State != Queued || rec.Job.Attempts != 0 || rec.Req == nil {
		t.Fatalf("after Close: state %s attempts %d request %v, want queued again", rec.Job.State, rec.Job.Attempts, rec.Req != nil)
	}
}

func TestCancel(t *testing.T) {
	st := openStore(t)
	r := newFakeRunner(true)
	m := openManager(t, Options{Store: st, Runner: r, Slots: 1})
	defer m.Close()
	js, err := m.Submit(context.Background(), []types.JobRequest{hello("a"), hello("a")})
	if err != nil {
		t.Fatal(err)
	}
	runID := r.waitStart(t)
	queuedID := js[1].ID
	if runID == queuedID {
		queuedID = js[0].ID
	}
	j, err := m.Cancel(context.Background(), queuedID)
	if err != nil || j.State != Cancelled {
		t.Fatalf("cancel queued: %+v %v", j, err)
	}
	j, err = m.Cancel(context.Background(), runID)
	if err != nil || j.State != Cancelled || j.Steps[0].Status != StepKilled {
		t.Fatalf("cancel running: %+v %v", j, err)
	}
	if _, err := m.Cancel(context.Background(), runID); !errdefs.IsConflict(err) {
		t.Fatalf("cancel twice: %v, want a conflict", err)
	}
	if _, err := m.Get(context.Background(), "jnope"); !errdefs.IsNotFound(err) {
		t.Fatalf("get unknown: %v", err)
	}
}

func TestSubmitIsAllOrNothing(t *testing.T) {
	st := openStore(t)
	m := openManager(t, Options{Store: st, Runner: newFakeRunner(false), Slots: 1,
		Quotas: map[string]Quota{"small": {MaxQueued: 1}},
		CheckImage: func(ctx context.Context, ref string) error {
			if ref != "busybox:1" {
				return errdefs.ErrNotFound
			}
			return nil
		}})
	defer m.Close()
	bad := hello("a")
	bad.Steps[0].Args = nil
	_, err := m.Submit(context.Background(), []types.JobRequest{hello("a"), bad})
	if errdefs.Field(err) != "jobs[1].steps[0].args" {
		t.Fatalf("batch with a bad job: %v (field %q)", err, errdefs.Field(err))
	}
	noImage := hello("a")
	noImage.Image = "nope:1"
	if _, err := m.Submit(context.Background(), []types.JobRequest{noImage}); errdefs.Field(err) != "image" {
		t.Fatalf("unknown image: %v", err)
	}
	m.mu.Lock()
	m.free = 0 // hold everything in the queue
	m.mu.Unlock()
	if _, err := m.Submit(context.Background(), []types.JobRequest{hello("small"), hello("small")}); !errors.Is(err, types.ErrQuota) {
		t.Fatalf("two jobs over a queue quota of one: %v", err)
	}
	kvs, _ := st.List(context.Background(), store.JobsPrefix)
	if len(kvs) != 0 {
		t.Fatalf("%d jobs stored after refused submissions", len(kvs))
	}
}

func TestRetention(t *testing.T) {
	st := openStore(t)
	fc := clock.NewFake(time.Unix(1_000_000, 0))
	m := openManager(t, Options{Store: st, Runner: newFakeRunner(false), Slots: 1, Clock: fc, Retention: time.Hour})
	defer m.Close()
	js, _ := m.Submit(context.Background(), []types.JobRequest{hello("a")})
	if _, err := m.Wait(context.Background(), js[0].ID); err != nil {
		t.Fatal(err)
	}
	fc.Advance(30 * time.Minute)
	waitFor(t, "sweep timer re-armed", func() bool { return fc.Timers() > 0 })
	if _, err := m.Get(context.Background(), js[0].ID); err != nil {
		t.Fatalf("job gone before its retention: %v", err)
	}
	for i := 0; i < 20; i++ {
		fc.Advance(10 * time.Minute)
		waitFor(t, "sweep timer re-armed", func() bool { return fc.Timers() > 0 })
	}
	waitFor(t, "job removed after retention", func() bool {
		_, err := m.Get(context.Background(), js[0].ID)
		return errdefs.IsNotFound(err)
	})
}

func TestCallbackRetriesWithBackoff(t *testing.T) {
	var calls atomic.Int32
	got := make(chan Job, 10)
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if calls.Add(1) < 3 {
			w.WriteHeader(http.StatusServiceUnavailable)
			return
		}
		var j Job
		json.NewDecoder(r.Body).Decode(&j)
		got <- j
	}))
	defer srv.Close()
	st := openStore(t)
	fc := clock.NewFake(time.Unix(1_000_000, 0))
	m := openManager(t, Options{Store: st, Runner: newFakeRunner(false), Slots: 1, Clock: fc, CallbackBackoff: time.Second})
	defer m.Close()
	req := hello("a")
	req.Callback = srv.URL + "/done"
	js, _ := m.Submit(context.Background(), []types.JobRequest{req})
	// Each failure arms a back-off timer (1s, then 2s) besides the sweep.
	for want := int32(1); want <= 2; want++ {
		waitFor(t, "callback attempt and back-off timer", func() bool { return calls.Load() == want && fc.Timers() == 2 })
		fc.Advance(time.Duration(want) * time.Second)
	}
	select {
	case j := <-got:
		if j.ID != js[0].ID || j.State != Done {
			t.Fatalf("callback body: %+v", j)
		}
	case <-time.After(30 * time.Second):
		t.Fatal("callback not delivered")
	}
	waitFor(t, "callback state stored", func() bool { return stored(t, st, js[0].ID).Job.CallbackState == "delivered" })
	if calls.Load() != 3 {
		t.Fatalf("%d callback requests, want 3", calls.Load())
	}
}

func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	for i := 0; i < 3000; i++ {
		if cond() {
			return
		}
		time.Sleep(5 * time.Millisecond)
	}
	t.Fatalf("timed out waiting for %s", what)
}

// TestRestartDeliversPendingCallback: a callback still pending when the
// daemon stopped is delivered by the next one, whose opening does not wait
// on it.
func TestRestartDeliversPendingCallback(t *testing.T) {
	var up atomic.Bool
	got := make(chan string, 10)
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if !up.Load() {
			w.WriteHeader(http.StatusServiceUnavailable)
			return
		}
		var j Job
		json.NewDecoder(r.Body).Decode(&j)
		got <- j.ID
	}))
	defer srv.Close()
	st := openStore(t)
	fc := clock.NewFake(time.Unix(1_000_000, 0))
	m := openManager(t, Options{Store: st, Runner: newFakeRunner(false), Slots: 1, Clock: fc})
	req := hello("a")
	req.Callback = srv.URL + "/done"
	js, err := m.Submit(context.Background(), []types.JobRequest{req})
	if err != nil {
		t.Fatal(err)
	}
	// The first attempt fails and arms its back-off timer; the stop comes
	// before it fires.
	waitFor(t, "the back-off timer", func() bool { return fc.Timers() == 2 })
	m.Close()
	if s := stored(t, st, js[0].ID).Job.CallbackState; s != "pending" {
		t.Fatalf("callback state %q after the stop, want pending", s)
	}
	up.Store(true)
	opened := make(chan *Manager, 1)
	go func() {
		m, err := Open(context.Background(), Options{Store: st, Runner: newFakeRunner(false), Slots: 1, Clock: fc})
		if err != nil {
			t.Error(err)
		}
		opened <- m
	}()
	select {
	case m = <-opened:
	case <-time.After(30 * time.Second):
		t.Fatal("Open did not return with a callback pending")
	}
	if m == nil {
		return
	}
	defer m.Close()
	select {
	case id := <-got:
		if id != js[0].ID {
			t.Fatalf("callback for %s, want %s", id, js[0].ID)
		}
	case <-time.After(30 * time.Second):
		t.Fatal("pending callback not delivered after the restart")
	}
	waitFor(t, "callback state stored", func() bool { return stored(t, st, js[0].ID).Job.CallbackState == "delivered" })
}
