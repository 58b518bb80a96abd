package jobs

import (
	"sort"
)

// Entry is a queued job as the scheduler sees it.
type Entry struct {
	ID       string
	Tenant   string
	Priority int
	// Seq orders jobs of equal priority: lower first (submission order).
	Seq uint64
}

// Quota bounds one tenant. Zero means unbounded.
type Quota struct {
	MaxQueued  int // jobs waiting
	MaxRunning int // jobs running at once
}

// Scheduler picks the next job to run: weighted fair share between tenants
// (start-time fair queueing by job count), and within a tenant the highest
// priority first, then submission order. It is pure logic, not safe for
// concurrent use; the Manager holds it under its lock.
//
// Each tenant has a virtual time that advances by 1/weight every time one
// of its jobs starts; the backlogged tenant with the lowest virtual time
// (that is under its running quota) goes next. A tenant that becomes
// backlogged again starts from the current virtual time, so idling earns
// no credit and cannot buy a burst later.
type Scheduler struct {
	Weights map[string]float64 // per tenant; missing means 1
	Quotas  map[string]Quota   // per tenant; missing means Default
	Default Quota

	tenants map[string]*tenantQueue
	vnow    float64 // virtual time of the job started last
}

type tenantQueue struct {
	name    string
	jobs    []Entry // sorted: priority desc, seq asc
	running int
	vt      float64
}

// NewScheduler returns an empty scheduler.
func NewScheduler() *Scheduler {
	return &Scheduler{tenants: map[string]*tenantQueue{}}
}

func (s *Scheduler) tenant(name string) *tenantQueue {
	t := s.tenants[name]
	if t == nil {
		t = &tenantQueue{name: name, vt: s.vnow}
		s.tenants[name] = t
	}
	return t
}

func (s *Scheduler) quota(tenant string) Quota {
	if q, ok := s.Quotas[tenant]; ok {
		return q
	}
	return s.Default
}

func (s *Scheduler) weight(tenant string) float64 {
	if w, ok := s.Weights[tenant]; ok && w > 0 {
		return w
	}
	return 1
}

// CanQueue reports whether tenant may queue n more jobs.
func (s *Scheduler) CanQueue(tenant string, n int) bool {
	q := s.quota(tenant)
	if q.MaxQueued <= 0 {
		return true
	}
	queued := 0
	if t := s.tenants[tenant]; t != nil {
		queued = len(t.jobs)
	}
	return queued+n <= q.MaxQueued
}

// Push queues e.
func (s *Scheduler) Push(e Entry) {
	t := s.tenant(e.Tenant)
	if len(t.jobs) == 0 && t.running == 0 && t.vt < s.vnow {
		t.vt = s.vnow // back from idle: no saved-up credit
	}
	i := sort.Search(len(t.jobs), func(i int) bool { return before(e, t.jobs[i]) })
	t.jobs = append(t.jobs, Entry{})
	copy(t.jobs[i+1:], t.jobs[i:])
	t.jobs[i] = e
}

func before(a, b Entry) bool {
	if a.Priority != b.Priority {
		return a.Priority > b.Priority
	}
	return a.Seq < b.Seq
}

// Remove takes a queued job out; it reports whether it was queued.
func (s *Scheduler) Remove(tenant, id string) bool {
	t := s.tenants[tenant]
	if t == nil {
		return false
	}
	for i, e := range t.jobs {
		if e.ID == id {
			t.jobs = append(t.jobs[:i], t.jobs[i+1:]...)
			s.gc(t)
			return true
		}
	}
	return false
}

// Next picks the job to start now, counts it as running and reports
// false when nothing may start.
func (s *Scheduler) Next() (Entry, bool) {
	var best *tenantQueue
	for _, t := range s.tenants {
		if len(t.jobs) == 0 {
			continue
		}
		if q := s.quota(t.name); q.MaxRunning > 0 && t.running >= q.MaxRunning {
			continue
		}
		if best == nil || t.vt < best.vt || (t.vt == best.vt && before(t.jobs[0], best.jobs[0])) {
			best = t
		}
	}
	if best == nil {
		return Entry{}, false
	}
	e := best.jobs[0]
	best.jobs = best.jobs[1:]
	best.running++
	if best.vt > s.vnow {
		s.vnow = best.vt
	}
	best.vt += 1 / s.weight(best.name)
	return e, true
}

// Started counts a job as running without taking it from the queue (a job
// found running after a restart).
func (s *Scheduler) Started(tenant string) { s.tenant(tenant).running++ }

// Done counts a running job of tenant as finished.
func (s *Scheduler) Done(tenant string) {
	t := s.tenants[tenant]
	if t == nil || t.running == 0 {
		return
	}
	t.running--
	s.gc(t)
}

// gc forgets an idle tenant whose virtual time is not ahead: it would be
// reset to the current virtual time anyway.
func (s *Scheduler) gc(t *tenantQueue) {
	if len(t.jobs) == 0 && t.running == 0 && t.vt <= s.vnow {
		delete(s.tenants, t.name)
	}
}

// Queued is the number of queued jobs of tenant ("" for all).
func (s *Scheduler) Queued(tenant string) int {
	n := 0
	for _, t := range s.tenants {
		if tenant == "" || t.name == tenant {
			n += len(t.jobs)
		}
	}
	return n
}

// Running is the number of running jobs of tenant ("" for all).
func (s *Scheduler) Running(tenant string) int {
	n := 0
	for _, t := range s.tenants {
		if tenant == "" || t.name == tenant {
			n += t.running
		}
	}
	return n
}

// SetRunning sets how many jobs of each tenant run (none for a tenant
// running does not name): in a cluster the leader counts them from the
// job records, whichever node runs them.
func (s *Scheduler) SetRunning(running map[string]int) {
	for name, n := range running {
		s.tenant(name).running = n
	}
	for name, t := range s.tenants {
		if _, ok := running[name]; !ok {
			t.running = 0
			s.gc(t)
		}
	}
}
