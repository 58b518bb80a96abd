// Package loadloop is the bounded load loop of shoal's integration tests
// and benchmark suites: a few clients send one request after another
// through a proxy until stopped, ending by themselves after a bounded time
// and count, and the loop keeps every request (its failure with the
// reason) and when each replica first answered. It depends on the
// standard library and clock only, so the cluster test harness and the
// benchmark suites share it without pulling in each other's parts.
package loadloop

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"time"

	"github.com/shoal-run/shoal/internal/clock"
)

// Fetch sends one request and returns the replica that answered (empty if
// the answer names none); an error is a failed request, its text the
// reason.
type Fetch func(ctx context.Context) (replica string, err error)

// Options bound a loop.
type Options struct {
	Clients  int           // clients sending at once (at least 1)
	Pause    time.Duration // a client's wait between an answer and its next request
	MaxTime  time.Duration // the loop ends by itself this long after its start
	MaxTotal int           // and after this many requests in all
	Timeout  time.Duration // a request's bound; 0: none but the loop's context
	Clock    clock.Clock   // nil: the wall clock
}

// Record is one request of a loop.
type Record struct {
	Start, End time.Time
	OK         bool
	Replica    string // the replica that answered, if OK
	Err        string // why it failed, if not OK
}

// Loop is a running load loop; End stops it.
type Loop struct {
	clk  clock.Clock
	stop chan struct{}
	once sync.Once
	done chan struct{} // closed when every client has returned

	mu       sync.Mutex
	sent     int
	recs     []Record
	failed   int
	firstErr string
	first    map[string]time.Time // replica → when its first answer arrived
	news     chan struct{}        // closed and replaced when first gains a replica
}

// Start starts a loop of fetch bounded by o. It ends when ctx is done, End
// is called, o.MaxTime has passed or o.MaxTotal requests were sent,
// whichever comes first.
func Start(ctx context.Context, o Options, fetch Fetch) (*Loop, error) {
	switch {
	case o.Clients < 1:
		return nil, fmt.Errorf("load loop: Clients %d: want at least 1", o.Clients)
	case o.MaxTotal < 1:
		return nil, fmt.Errorf("load loop: MaxTotal %d: want at least 1", o.MaxTotal)
	case o.MaxTime <= 0:
		return nil, fmt.Errorf("load loop: MaxTime %s: want more than 0", o.MaxTime)
	case o.Pause < 0 || o.Timeout < 0:
		return nil, fmt.Errorf("load loop: Pause %s, Timeout %s: want neither below 0", o.Pause, o.Timeout)
	}
	clk := o.Clock
	if clk == nil {
		clk = clock.Real{}
	}
	l := &Loop{clk: clk, stop: make(chan struct{}), done: make(chan struct{}),
		first: map[string]time.Time{}, news: make(chan struct{})}
	deadline := clk.Now().Add(o.MaxTime)
	var wg sync.WaitGroup
	for range o.Clients {
		wg.Add(1)
		go func() {
			defer wg.Done()
			l.client(ctx, o, deadline, fetch)
		}()
	}
	go func() {
		wg.Wait()
		close(l.done)
	}()
	return l, nil
}

// client sends requests one after another until the loop ends.
func (l *Loop) client(ctx context.Context, o Options, deadline time.Time, fetch Fetch) {
	for ctx.Err() == nil && l.clk.Now().Before(deadline) {
		select {
		case <-l.stop:
			return
		default:
		}
		l.mu.Lock()
		over := l.sent >= o.MaxTotal
		if !over {
			l.sent++
		}
		l.mu.Unlock()
		if over {
			return
		}
		rctx, cancel := ctx, context.CancelFunc(func() {})
		if o.Timeout > 0 {
			rctx, cancel = context.WithTimeout(ctx, o.Timeout)
		}
		rec := Record{Start: l.clk.Now()}
		replica, err := fetch(rctx)
		cancel()
		rec.End = l.clk.Now()
		if err != nil {
			rec.Err = err.Error()
		} else {
			rec.OK, rec.Replica = true, replica
		}
		l.add(rec)
		if o.Pause > 0 && !l.pause(ctx, o.Pause) {
			return
		}
	}
}

// add keeps rec.
func (l *Loop) add(rec Record) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.recs = append(l.recs, rec)
	if !rec.OK {
		l.failed++
		if l.firstErr == "" {
			l.firstErr = rec.Err
		}
		return
	}
	if _, seen := l.first[rec.Replica]; !seen {
		l.first[rec.Replica] = rec.End
		close(l.news)
		l.news = make(chan struct{})
	}
}

// pause waits d on the loop's clock and reports whether the loop goes on.
func (l *Loop) pause(ctx context.Context, d time.Duration) bool {
	t := l.clk.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C():
		return true
	case <-l.stop:
	case <-ctx.Done():
	}
	return false
}

// End stops the loop and waits for its last requests.
func (l *Loop) End() {
	l.once.Do(func() { close(l.stop) })
	<-l.done
}

// Done is closed when the loop has ended, by End or by itself.
func (l *Loop) Done() <-chan struct{} { return l.done }

// WaitAnswer waits until a replica for which want holds has answered and
// returns when it first did. It fails, naming what with the loop's first
// failure, after limit on the loop's clock or once the loop has ended
// without such an answer.
func (l *Loop) WaitAnswer(ctx context.Context, limit time.Duration, what string, want func(replica string) bool) (time.Time, error) {
	t := l.clk.NewTimer(limit)
	defer t.Stop()
	for {
		at, _, news := l.answered(want)
		if !at.IsZero() {
			return at, nil
		}
		select {
		case <-news:
		case <-l.done:
			// Every answer is in: look once more, then give up.
			at, firstErr, _ := l.answered(want)
			if !at.IsZero() {
				return at, nil
			}
			return time.Time{}, fmt.Errorf("%s: the load loop ended with no answer (first failure: %q)", what, firstErr)
		case <-t.C():
			_, firstErr, _ := l.answered(want)
			return time.Time{}, fmt.Errorf("%s: no answer within %s (first failure: %q)", what, limit, firstErr)
		case <-ctx.Done():
			return time.Time{}, fmt.Errorf("%s: %w", what, ctx.Err())
		}
	}
}

// answered returns when the first replica for which want holds answered
// (zero if none has), the loop's first failure, and a channel closed when
// another replica answers.
func (l *Loop) answered(want func(string) bool) (at time.Time, firstErr string, news <-chan struct{}) {
	l.mu.Lock()
	defer l.mu.Unlock()
	for r, ft := range l.first {
		if want(r) && (at.IsZero() || ft.Before(at)) {
			at = ft
		}
	}
	return at, l.firstErr, l.news
}

// Counts returns how many requests were sent and failed (errors, answers
// other than expected, no answer within the timeout), with the first
// failure. Requests still in flight count as sent.
func (l *Loop) Counts() (total, failed int, first string) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.sent, l.failed, l.firstErr
}

// Records returns a copy of the finished requests, in the order they
// finished.
func (l *Loop) Records() []Record {
	l.mu.Lock()
	defer l.mu.Unlock()
	return append([]Record(nil), l.recs...)
}

// HelloReplica reads the replica's name from an answer of the example app
// hello, "GREETING from NAME (request N)"; empty if the answer has none.
func HelloReplica(body string) string {
	_, rest, ok := strings.Cut(body, " from ")
	if !ok {
		return ""
	}
	name, _, _ := strings.Cut(rest, " ")
	return name
}
