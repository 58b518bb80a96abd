package jobs

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"runtime"
	"sync"
	"time"

	"github.com/shoal-run/shoal/internal/api/types"
	"github.com/shoal-run/shoal/internal/clock"
	"github.com/shoal-run/shoal/internal/errdefs"
	"github.com/shoal-run/shoal/internal/store"
)

// Runner runs one job's steps to the end and fills in j.Steps. It returns
// an error only when the platform could not run the job at all; ctx ends
// when the job is cancelled or the daemon stops. It may call ready once
// j's results are final and it only has cleaning up left: the job is then
// answered right away, while its slot stays taken until Run returns.
type Runner interface {
	Run(ctx context.Context, j *Job, p *Plan, ready func()) error
}

// Options configure a Manager.
type Options struct {
	Store  store.Store
	Runner Runner
	// CheckImage reports whether an image ref can be run (nil: any).
	CheckImage func(ctx context.Context, ref string) error
	// Slots is how many jobs run at once (default 1).
	Slots int
	// Weights and Quotas per tenant; DefaultQuota for the rest.
	Weights      map[string]float64
	Quotas       map[string]Quota
	DefaultQuota Quota
	// Retention is how long finished jobs are kept (default 24h).
	Retention time.Duration
	// MaxAttempts bounds how often a job the daemon lost while it ran is
	// started (default 2); after that it is failed with a note.
	MaxAttempts int
	// HTTP delivers callbacks (default: a client with a 10s timeout).
	HTTP *http.Client
	// CallbackRetries and CallbackBackoff shape callback delivery
	// (defaults 6 and 1s, doubling).
	CallbackRetries int
	CallbackBackoff time.Duration
	Clock           clock.Clock
	Logger          *slog.Logger
	// Cluster, on an etcd store, makes the queue the cluster's: the leader
	// assigns jobs to nodes, each node runs those assigned to it (see
	// Cluster). Nil: a single host.
	Cluster Cluster
	// Node is this node's name in a cluster.
	Node string
	// Event, if set, records a job taken back from a lost node (kind
	// "job_requeued" or "job_lost") in the event log.
	Event func(kind, reason string)
	// ImageDigest, in a cluster, resolves a submitted job's image to the
	// digest stored with it: the node that runs the job runs that image,
	// by digest (its Runner fetches it from another node if it lacks it).
	ImageDigest func(ctx context.Context, ref string) (string, error)
}

// Manager is one host's persistent job queue: jobs are written to the
// store when submitted, when they start and when they finish, so a
// restarted daemon loses none. It runs up to Slots jobs at once, chosen by
// the Scheduler. It is also the core a ClusterQueue runs its node's jobs
// with.
type Manager struct {
	o     Options
	clock clock.Clock
	log   *slog.Logger

	mu      sync.Mutex
	sched   *Scheduler
	live    map[string]*entry // queued and running
	free    int
	seq     uint64
	closing bool
	ctx     context.Context
	stop    context.CancelFunc
	wg      sync.WaitGroup
	janitor clock.Timer

	// node is the cluster's queue this core runs a node's jobs for; nil
	// on one host.
	node *ClusterQueue
}

type entry struct {
	job     Job
	plan    *Plan
	seq     uint64
	done    chan struct{}
	cancel  context.CancelFunc
	running bool
	// cancelled is set by Cancel, so the end is reported as cancelled.
	cancelled bool
	// In a cluster: revoked is set when the job is no longer this node's
	// (its end is not stored), ending once its end is being stored.
	revoked, ending bool
	// stored, if set, is closed once the job's submission is stored (see
	// submitOne); unstored says that failed, so nothing of it is stored;
	// noStart, that its start is not to be stored on its own: it was
	// stored with its submission, or nothing of it is stored before its
	// end (see Run).
	stored            chan struct{}
	unstored, noStart bool
}

// record is what is stored of a job under store.JobKey: the job, and the
// request as submitted, to run it again (dropped once it has finished).
type record struct {
	Job Job               `json:"job"`
	Req *types.JobRequest `json:"request,omitempty"`
	Seq uint64            `json:"seq"`
	// Cancel asks the node the job is assigned to to cancel it (cluster).
	Cancel bool `json:"cancel,omitempty"`
	// Digest is the image's manifest digest as the submitting node had it
	// (cluster): the job runs this image on whatever node.
	Digest string `json:"digest,omitempty"`
}

// Open opens one host's queue: it loads the jobs in the store: queued jobs
// are queued again, jobs that were running are queued again (or failed
// after MaxAttempts), pending callbacks are retried. Then it starts running
// jobs. A cluster's queue opens with OpenCluster.
func Open(ctx context.Context, o Options) (*Manager, error) {
	if o.Store == nil || o.Runner == nil {
		return nil, errors.New("jobs: a store and a runner are needed")
	}
	o = o.withDefaults()
	if o.Cluster != nil {
		return nil, errors.New("jobs: a cluster's queue opens with OpenCluster")
	}
	m := newManager(ctx, o)
	if err := m.recover(ctx); err != nil {
		m.stop()
		return nil, err
	}
	m.mu.Lock()
	m.dispatch()
	m.janitor = m.clock.AfterFunc(m.sweepEvery(), m.sweep)
	m.mu.Unlock()
	return m, nil
}

// withDefaults fills in the options left unset.
func (o Options) withDefaults() Options {
	if o.Slots <= 0 {
		o.Slots = 1
	}
	if o.Retention <= 0 {
		o.Retention = 24 * time.Hour
	}
	if o.MaxAttempts <= 0 {
		o.MaxAttempts = 2
	}
	if o.HTTP == nil {
		o.HTTP = &http.Client{Timeout: 10 * time.Second}
	}
	if o.CallbackRetries <= 0 {
		o.CallbackRetries = 6
	}
	if o.CallbackBackoff <= 0 {
		o.CallbackBackoff = time.Second
	}
	if o.Clock == nil {
		o.Clock = clock.Real{}
	}
	if o.Logger == nil {
		o.Logger = slog.New(slog.DiscardHandler)
	}
	return o
}

// newManager returns the queue's core over o (defaults filled in).
func newManager(ctx context.Context, o Options) *Manager {
	m := &Manager{o: o, clock: o.Clock, log: o.Logger, sched: NewScheduler(), live: map[string]*entry{}, free: o.Slots}
	m.sched.Weights, m.sched.Quotas, m.sched.Default = o.Weights, o.Quotas, o.DefaultQuota
	m.ctx, m.stop = context.WithCancel(context.WithoutCancel(ctx))
	return m
}

// Close stops starting jobs, kills the running ones and puts them back in
// the queue for the next daemon, and waits for that to be written.
func (m *Manager) Close() {
	m.mu.Lock()
	m.closing = true
	if m.janitor != nil {
		m.janitor.Stop()
	}
	m.mu.Unlock()
	m.stop()
	m.wg.Wait()
}

// Submit validates every request, then stores and queues them all; on any
// error none is queued.
func (m *Manager) Submit(ctx context.Context, reqs []types.JobRequest) ([]Job, error) {
	entries, err := m.admit(ctx, reqs)
	if err != nil {
		return nil, err
	}
	if len(entries) == 1 {
		return m.submitOne(ctx, entries[0], false)
	}
	if err := m.storeNew(ctx, entries); err != nil {
		return nil, err
	}
	out := make([]Job, len(entries))
	m.mu.Lock()
	for i, e := range entries {
		m.live[e.job.ID] = e
		m.sched.Push(Entry{ID: e.job.ID, Tenant: e.job.Tenant, Priority: e.job.Priority, Seq: e.seq})
		out[i] = e.job
	}
	m.dispatch()
	m.mu.Unlock()
	return out, nil
}

// storeNew stores jobs just submitted, all or none: stored before it is
// queued, a job the caller was told about survives a crash.
func (m *Manager) storeNew(ctx context.Context, entries []*entry) error {
	for i, e := range entries {
		if err := m.putNew(ctx, e, &e.plan.Req); err != nil {
			for _, done := range entries[:i] {
				m.o.Store.Delete(context.WithoutCancel(ctx), store.JobKey(done.job.ID))
			}
			return err
		}
	}
	return nil
}

// admit validates every request against its plan, its image and its
// tenant's queue, and makes the jobs' entries, neither stored nor queued.
func (m *Manager) admit(ctx context.Context, reqs []types.JobRequest) ([]*entry, error) {
	if len(reqs) == 0 {
		return nil, errdefs.Invalid("jobs", "no job given")
	}
	if err := CheckBatch(len(reqs)); err != nil {
		return nil, err
	}
	plans := make([]*Plan, len(reqs))
	perTenant := map[string]int{}
	checked := map[string]error{}
	for i, r := range reqs {
		prefix := ""
		if len(reqs) > 1 {
			prefix = fmt.Sprintf("jobs[%d].", i)
		}
		p, err := NewPlan(r, prefix)
		if err != nil {
			return nil, err
		}
		if m.o.CheckImage != nil {
			err, ok := checked[r.Image]
			if !ok {
				err = m.o.CheckImage(ctx, r.Image)
				checked[r.Image] = err
			}
			if err != nil {
				if errdefs.IsNotFound(err) {
					return nil, errdefs.Invalid(prefix+"image", "image %q not found", r.Image)
				}
				return nil, fmt.Errorf("image %q: %w", r.Image, err)
			}
		}
		plans[i] = p
		perTenant[p.Tenant]++
	}
	m.mu.Lock()
	if m.closing {
		m.mu.Unlock()
		return nil, fmt.Errorf("jobs: the daemon is stopping: %w", errdefs.ErrUnavailable)
	}
	for t, n := range perTenant {
		if !m.canQueue(t, n) {
			m.mu.Unlock()
			return nil, fmt.Errorf("tenant %q: %d more jobs would exceed its queue of %d: %w", t, n, m.sched.quota(t).MaxQueued, types.ErrQuota)
		}
	}
	now := m.clock.Now()
	entries := make([]*entry, len(plans))
	for i, p := range plans {
		m.seq++
		entries[i] = &entry{plan: p, seq: m.seq, done: make(chan struct{}), job: Job{
			ID: newID(), Tenant: p.Tenant, Priority: p.Req.Priority, Image: p.Req.Image,
			State: Queued, Submitted: now, Callback: p.Req.Callback,
		}}
	}
	m.mu.Unlock()
	return entries, nil
}

// dispatch starts queued jobs while slots are free. m.mu is held.
func (m *Manager) dispatch() {
	for m.free > 0 && !m.closing {
		en, ok := m.sched.Next()
		if !ok {
			return
		}
		e := m.live[en.ID]
		if e == nil {
			m.sched.Done(en.Tenant)
			continue
		}
		m.free--
		e.running = true
		ctx, cancel := context.WithCancel(m.ctx)
		e.cancel = cancel
		now := m.clock.Now()
		e.job.State, e.job.Started = Running, &now
		e.job.Attempts++
		e.job.QueueMs = ms(now.Sub(e.job.Submitted))
		m.wg.Add(1)
		go m.run(ctx, e, e.job)
	}
}

func (m *Manager) run(ctx context.Context, e *entry, j Job) {
	defer m.wg.Done()
	defer e.cancel()
	// The start is stored while the sandbox starts (or was, with the
	// submission: see submitOne); the result is stored after it. A crash
	// before the start is stored finds the job queued and runs it again.
	started := make(chan struct{})
	if m.node != nil {
		close(started) // stored before it started
	} else {
		go func(j Job) {
			defer close(started)
			if !m.startToStore(e) {
				return
			}
			if err := m.put(context.WithoutCancel(ctx), &j, &e.plan.Req, e.seq); err != nil {
				m.log.Error("job start not stored", "job", j.ID, "err", err)
			}
		}(j)
	}
	t1 := time.Now()
	var once sync.Once
	publish := func(err error) {
		once.Do(func() {
			<-started
			m.publish(ctx, e, j, err, time.Since(t1))
		})
	}
	err := m.o.Runner.Run(ctx, &j, e.plan, func() { publish(nil) })
	publish(err)
	m.mu.Lock()
	m.sched.Done(j.Tenant)
	m.free++
	m.dispatch()
	m.mu.Unlock()
	if m.node != nil {
		m.node.kickPass()
	}
}

// publish ends job j (as the runner left it, err from Run): stores it,
// answers its waiters and sends its callback.
func (m *Manager) publish(ctx context.Context, e *entry, j Job, err error, ran time.Duration) {
	if m.node != nil {
		m.node.publishNode(e, j, err)
		return
	}
	now := m.clock.Now()
	m.mu.Lock()
	cancelled, closing := e.cancelled, m.closing && !e.cancelled
	if e.unstored {
		delete(m.live, j.ID)
		close(e.done)
		m.mu.Unlock()
		return
	}
	m.mu.Unlock()
	req := (*types.JobRequest)(nil)
	switch {
	case closing:
		// The daemon is stopping: the job goes back to the queue, this
		// attempt not counted.
		j.State, j.Started, j.Steps, j.Error = Queued, nil, nil, ""
		j.Attempts--
		req = &e.plan.Req
	case cancelled:
		j.State, j.Finished = Cancelled, &now
	case err != nil:
		j.State, j.Finished, j.Error = Failed, &now, err.Error()
	default:
		j.State, j.Finished = Done, &now
		j.OK = stepsOK(j.Steps)
	}
	if j.Callback != "" && j.State != Queued {
		j.CallbackState = "pending"
	}
	t := time.Now()
	if err := m.put(context.WithoutCancel(ctx), &j, req, e.seq); err != nil {
		m.log.Error("job result not stored", "job", j.ID, "err", err)
	}
	m.mu.Lock()
	e.job = j
	delete(m.live, j.ID)
	close(e.done)
	m.mu.Unlock()
	// A waiter just woken runs next on this thread, but only once this
	// goroutine blocks, and the runner's cleanup that follows blocks only
	// in syscalls, which keep the thread: let it run now.
	runtime.Gosched()
	if j.CallbackState == "pending" {
		m.deliverLater(j)
	}
	m.log.Debug("job finished", "job", j.ID, "tenant", j.Tenant, "state", j.State, "ok", j.OK,
		"run", ran.String(), "store_result", time.Since(t).String())
}

func stepsOK(steps []StepResult) bool {
	for _, s := range steps {
		if s.Status != StepOK {
			return false
		}
	}
	return len(steps) > 0
}

func newID() string {
	b := make([]byte, 8)
	rand.Read(b)
	return "j" + hex.EncodeToString(b)
}

func ms(d time.Duration) float64 { return float64(d.Microseconds()) / 1000 }
