package resilience

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"time"

	"github.com/shoal-run/shoal/internal/bench/kit"
)

// Bounds of the resilience suite's load loop.
const (
	loopClients  = 4
	loopPause    = time.Millisecond
	loopMaxTime  = 60 * time.Second
	loopMaxTotal = 200000
	loopTimeout  = 10 * time.Second // per request
)

// loadLoop is the resilience suite's bounded load loop through the proxy:
// loopClients clients send GET / to an app one request after another,
// loopPause apart, until stopped, for at most loopMaxTime and loopMaxTotal
// requests in all. It keeps every request and, per replica, when its first
// answer arrived.
type loadLoop struct {
	e    *env
	app  string
	stop chan struct{}
	once sync.Once
	wg   sync.WaitGroup

	mu    sync.Mutex
	recs  []kit.ReqRecord
	first map[string]time.Time // replica → when its first answer arrived
	err   string               // the first failure
}

// startLoop starts the load loop on app.
func (e *env) startLoop(ctx context.Context, app string) *loadLoop {
	l := &loadLoop{e: e, app: app, stop: make(chan struct{}), first: map[string]time.Time{}}
	deadline := time.Now().Add(loopMaxTime)
	var mu sync.Mutex
	sent := 0
	for i := 0; i < loopClients; i++ {
		l.wg.Add(1)
		go func() {
			defer l.wg.Done()
			for ctx.Err() == nil && time.Now().Before(deadline) {
				select {
				case <-l.stop:
					return
				default:
				}
				mu.Lock()
				sent++
				over := sent > loopMaxTotal
				mu.Unlock()
				if over {
					return
				}
				rctx, cancel := context.WithTimeout(ctx, loopTimeout)
				t0 := time.Now()
				_, _, body, err := e.Request(rctx, app, "/")
				cancel()
				rec := kit.ReqRecord{Start: t0, End: time.Now(), OK: err == nil}
				if err == nil {
					rec.Replica = helloReplica(body)
				}
				l.mu.Lock()
				l.recs = append(l.recs, rec)
				if err != nil && l.err == "" {
					l.err = err.Error()
				}
				if _, seen := l.first[rec.Replica]; rec.OK && !seen {
					l.first[rec.Replica] = rec.End
				}
				l.mu.Unlock()
				time.Sleep(loopPause)
			}
		}()
	}
	return l
}

// helloReplica reads the replica name from hello's answer, "GREETING from
// NAME (request N)".
func helloReplica(body string) string {
	_, rest, ok := strings.Cut(body, " from ")
	if !ok {
		return ""
	}
	name, _, _ := strings.Cut(rest, " ")
	return name
}

// end stops the loop and waits for its last requests.
func (l *loadLoop) end() {
	l.once.Do(func() { close(l.stop) })
	l.wg.Wait()
}

// waitAnswer waits until a replica for which want holds has answered and
// returns when its first answer arrived, or fails after limit.
func (l *loadLoop) waitAnswer(ctx context.Context, limit time.Duration, what string, want func(replica string) bool) (time.Time, error) {
	deadline := time.Now().Add(limit)
	for {
		l.mu.Lock()
		var at time.Time
		for r, t := range l.first {
			if want(r) && (at.IsZero() || t.Before(at)) {
				at = t
			}
		}
		first := l.err
		l.mu.Unlock()
		if !at.IsZero() {
			return at, nil
		}
		if time.Now().After(deadline) {
			return time.Time{}, fmt.Errorf("app %q: %s: no answer within %s (first failure: %q)", l.app, what, limit, first)
		}
		select {
		case <-ctx.Done():
			return time.Time{}, ctx.Err()
		case <-time.After(time.Millisecond):
		}
	}
}

// counts returns how many requests the loop sent and how many failed
// (errors, timeouts, answers other than 200), with the first failure.
func (l *loadLoop) counts() (total, failed int, first string) {
	l.mu.Lock()
	defer l.mu.Unlock()
	for _, r := range l.recs {
		if !r.OK {
			failed++
		}
	}
	return len(l.recs), failed, l.err
}

// records returns a copy of the requests so far.
func (l *loadLoop) records() []kit.ReqRecord {
	l.mu.Lock()
	defer l.mu.Unlock()
	return append([]kit.ReqRecord(nil), l.recs...)
}
