package clock

import (
	"sort"
	"sync"
	"time"
)

// Fake is a Clock that moves only when Advance or Set is called. Timers whose
// deadline is reached fire in deadline order during Advance.
type Fake struct {
	mu     sync.Mutex
	now    time.Time
	timers []*fakeTimer
}

// NewFake returns a Fake set to start.
func NewFake(start time.Time) *Fake { return &Fake{now: start} }

// Now returns the fake time.
func (f *Fake) Now() time.Time {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.now
}

// Since returns the fake time elapsed since t.
func (f *Fake) Since(t time.Time) time.Duration { return f.Now().Sub(t) }

// NewTimer returns a timer that fires when the fake time reaches now+d.
func (f *Fake) NewTimer(d time.Duration) Timer {
	return f.add(d, nil)
}

// AfterFunc calls fn (in its own goroutine) when the fake time reaches now+d.
func (f *Fake) AfterFunc(d time.Duration, fn func()) Timer {
	return f.add(d, fn)
}

func (f *Fake) add(d time.Duration, fn func()) *fakeTimer {
	f.mu.Lock()
	defer f.mu.Unlock()
	t := &fakeTimer{clock: f, when: f.now.Add(d), fn: fn, ch: make(chan time.Time, 1), active: true}
	f.timers = append(f.timers, t)
	return t
}

// Advance moves the fake time forward by d and fires due timers.
func (f *Fake) Advance(d time.Duration) { f.Set(f.Now().Add(d)) }

// Set moves the fake time to t and fires due timers.
func (f *Fake) Set(t time.Time) {
	f.mu.Lock()
	f.now = t
	// A fired timer may be Reset at once by its owner: copy what firing
	// needs while the lock is held.
	type firing struct {
		when time.Time
		fn   func()
		ch   chan time.Time
	}
	var due []firing
	keep := f.timers[:0]
	for _, tm := range f.timers {
		if tm.active && !tm.when.After(t) {
			tm.active = false
			due = append(due, firing{tm.when, tm.fn, tm.ch})
		} else if tm.active {
			keep = append(keep, tm)
		}
	}
	f.timers = keep
	f.mu.Unlock()
	sort.Slice(due, func(i, j int) bool { return due[i].when.Before(due[j].when) })
	for _, tm := range due {
		if tm.fn != nil {
			go tm.fn()
		} else {
			select {
			case tm.ch <- tm.when:
			default:
			}
		}
	}
}

// Timers returns how many timers are waiting; tests use it to know a goroutine
// has armed its timer before advancing.
func (f *Fake) Timers() int {
	f.mu.Lock()
	defer f.mu.Unlock()
	return len(f.timers)
}

// Next returns how long until the earliest waiting timer is due, and
// whether one waits.
func (f *Fake) Next() (time.Duration, bool) {
	f.mu.Lock()
	defer f.mu.Unlock()
	var first time.Time
	for _, t := range f.timers {
		if t.active && (first.IsZero() || t.when.Before(first)) {
			first = t.when
		}
	}
	return first.Sub(f.now), !first.IsZero()
}

type fakeTimer struct {
	clock  *Fake
	when   time.Time
	fn     func()
	ch     chan time.Time
	active bool
}

func (t *fakeTimer) C() <-chan time.Time { return t.ch }

func (t *fakeTimer) Stop() bool {
	f := t.clock
	f.mu.Lock()
	defer f.mu.Unlock()
	was := t.active
	t.active = false
	for i, tm := range f.timers {
		if tm == t {
			f.timers = append(f.timers[:i], f.timers[i+1:]...)
			break
		}
	}
	return was
}

func (t *fakeTimer) Reset(d time.Duration) bool {
	was := t.Stop()
	f := t.clock
	f.mu.Lock()
	defer f.mu.Unlock()
	t.when = f.now.Add(d)
	t.active = true
	f.timers = append(f.timers, t)
	return was
}

var _ Clock = (*Fake)(nil)
