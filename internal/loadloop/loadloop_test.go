package loadloop

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"runtime"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/shoal-run/shoal/internal/clock"
)

// hello is a loopback server answering as the example app hello does, the
// replica named after the request's number n: every fifth request (n = 5,
// 10, ...) answers 503, the others come from r<n%2>.
func hello(t *testing.T) (*httptest.Server, *atomic.Int64) {
	t.Helper()
	var n atomic.Int64
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		i := n.Add(1)
		if i%5 == 0 {
			http.Error(w, "busy", http.StatusServiceUnavailable)
			return
		}
		fmt.Fprintf(w, "hello from r%d (request %d)\n", i%2, i)
	}))
	t.Cleanup(srv.Close)
	return srv, &n
}

// get fetches url and returns the replica hello names; an answer other
// than 200 is an error.
func get(url string) Fetch {
	c := &http.Client{}
	return func(ctx context.Context) (string, error) {
		req, err := http.NewRequestWithContext(ctx, "GET", url, nil)
		if err != nil {
			return "", err
		}
		resp, err := c.Do(req)
		if err != nil {
			return "", err
		}
		defer resp.Body.Close()
		b, err := io.ReadAll(resp.Body)
		if err != nil {
			return "", err
		}
		if resp.StatusCode != http.StatusOK {
			return "", fmt.Errorf("%s: %s", resp.Status, strings.TrimSpace(string(b)))
		}
		return HelloReplica(string(b)), nil
	}
}

func wait(t *testing.T, l *Loop) {
	t.Helper()
	select {
	case <-l.Done():
	case <-time.After(time.Minute):
		l.End()
		t.Fatal("the loop did not end by itself")
	}
}

// TestLoopStopsAtMaxTotal: the loop ends by itself after MaxTotal requests
// and counts each failure with its reason and each replica's first answer.
func TestLoopStopsAtMaxTotal(t *testing.T) {
	srv, n := hello(t)
	l, err := Start(context.Background(), Options{Clients: 3, MaxTime: time.Hour, MaxTotal: 40}, get(srv.URL))
	if err != nil {
		t.Fatal(err)
	}
	wait(t, l)
	total, failed, first := l.Counts()
	if total != 40 || n.Load() != 40 {
		t.Fatalf("sent %d, server saw %d, want 40 each", total, n.Load())
	}
	if failed != 8 || !strings.Contains(first, "503") || !strings.Contains(first, "busy") {
		t.Fatalf("failed %d (first %q), want 8 with 503 busy", failed, first)
	}
	recs := l.Records()
	if len(recs) != 40 {
		t.Fatalf("%d records, want 40", len(recs))
	}
	firsts := map[string]time.Time{}
	bad := 0
	for _, r := range recs {
		if !r.OK {
			bad++
			if !strings.Contains(r.Err, "503") {
				t.Errorf("failed record without its reason: %+v", r)
			}
			continue
		}
		if r.Replica != "r0" && r.Replica != "r1" {
			t.Errorf("record names replica %q", r.Replica)
		}
		if f, ok := firsts[r.Replica]; !ok || r.End.Before(f) {
			firsts[r.Replica] = r.End
		}
	}
	if bad != failed {
		t.Errorf("%d failed records, Counts says %d", bad, failed)
	}
	for _, name := range []string{"r0", "r1"} {
		at, err := l.WaitAnswer(context.Background(), time.Minute, name, func(r string) bool { return r == name })
		if err != nil || !at.Equal(firsts[name]) {
			t.Errorf("WaitAnswer(%s) = %v, %v; want %v", name, at, err, firsts[name])
		}
	}
	_, err = l.WaitAnswer(context.Background(), time.Minute, "r9", func(r string) bool { return r == "r9" })
	if err == nil || !strings.Contains(err.Error(), "r9: the load loop ended") || !strings.Contains(err.Error(), "503") {
		t.Errorf("WaitAnswer for a replica that never answered: %v", err)
	}
	l.End() // ending an ended loop is harmless
}

// parked waits until k timers are armed on fc.
func parked(t *testing.T, fc *clock.Fake, k int) {
	t.Helper()
	for i := 0; fc.Timers() != k; i++ {
		if i > 1e6 {
			t.Fatalf("%d timers armed, want %d", fc.Timers(), k)
		}
		runtime.Gosched()
	}
}

// TestLoopStopsAtMaxTime: on a fake clock, two clients pausing 10 ms
// between requests send one request each per 10 ms until MaxTime.
func TestLoopStopsAtMaxTime(t *testing.T) {
	srv, _ := hello(t)
	fc := clock.NewFake(time.Unix(1e9, 0))
	l, err := Start(context.Background(), Options{Clients: 2, Pause: 10 * time.Millisecond, MaxTime: time.Second,
		MaxTotal: 1e6, Clock: fc}, get(srv.URL))
	if err != nil {
		t.Fatal(err)
	}
	defer l.End()
	for step := 0; step < 100; step++ {
		parked(t, fc, 2)
		fc.Advance(10 * time.Millisecond)
	}
	wait(t, l)
	if total, _, _ := l.Counts(); total != 200 {
		t.Fatalf("sent %d in 1 s of 10 ms steps from 2 clients, want 200", total)
	}
	for _, r := range l.Records() {
		if r.End.Sub(time.Unix(1e9, 0)) >= time.Second {
			t.Fatalf("a request ended at %s after MaxTime", r.End)
		}
	}
}

// TestLoopWaitAnswerLimit: WaitAnswer gives up after its limit on the
// loop's clock and names the first failure.
func TestLoopWaitAnswerLimit(t *testing.T) {
	fc := clock.NewFake(time.Unix(1e9, 0))
	fail := func(context.Context) (string, error) { return "", errors.New("connection refused") }
	l, err := Start(context.Background(), Options{Clients: 1, Pause: time.Second, MaxTime: time.Hour, MaxTotal: 1e6, Clock: fc}, fail)
	if err != nil {
		t.Fatal(err)
	}
	defer l.End()
	errc := make(chan error, 1)
	go func() {
		_, err := l.WaitAnswer(context.Background(), 5*time.Second, "app x", func(string) bool { return true })
		errc <- err
	}()
	parked(t, fc, 2) // the client's pause and WaitAnswer's limit
	fc.Advance(5 * time.Second)
	err = <-errc
	if err == nil || !strings.Contains(err.Error(), "app x: no answer within 5s") || !strings.Contains(err.Error(), "connection refused") {
		t.Fatalf("WaitAnswer: %v", err)
	}
}

// TestLoopTimeout: a request with no answer within Timeout fails with
// the deadline as its reason.
func TestLoopTimeout(t *testing.T) {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { <-r.Context().Done() }))
	defer srv.Close()
	l, err := Start(context.Background(), Options{Clients: 1, MaxTime: time.Hour, MaxTotal: 2, Timeout: 20 * time.Millisecond}, get(srv.URL))
	if err != nil {
		t.Fatal(err)
	}
	wait(t, l)
	total, failed, first := l.Counts()
	if total != 2 || failed != 2 || !strings.Contains(first, "deadline exceeded") {
		t.Fatalf("sent %d, failed %d (first %q); want 2 failed by the deadline", total, failed, first)
	}
}

// TestLoopEnd: End and a cancelled context each stop a loop that would run
// on; nothing is sent after it returns.
func TestLoopEnd(t *testing.T) {
	srv, n := hello(t)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	o := Options{Clients: 2, Pause: time.Millisecond, MaxTime: time.Hour, MaxTotal: 1e6}
	byEnd, err := Start(context.Background(), o, get(srv.URL))
	if err != nil {
		t.Fatal(err)
	}
	byCtx, err := Start(ctx, o, get(srv.URL))
	if err != nil {
		t.Fatal(err)
	}
	for _, l := range []*Loop{byEnd, byCtx} {
		if _, err := l.WaitAnswer(context.Background(), time.Minute, "any", func(r string) bool { return r != "" }); err != nil {
			t.Fatal(err)
		}
	}
	byEnd.End()
	select {
	case <-byEnd.Done():
	default:
		t.Fatal("End returned before the loop was done")
	}
	cancel()
	wait(t, byCtx)
	a, _, _ := byEnd.Counts()
	b, _, _ := byCtx.Counts()
	if a == 0 || b == 0 || len(byEnd.Records()) != a || len(byCtx.Records()) != b {
		t.Fatalf("sent %d and %d, records %d and %d: want every sent request finished", a, b, len(byEnd.Records()), len(byCtx.Records()))
	}
	// A request may fail on the cancelled context before it leaves, so
	// the server can see fewer, never more.
	if seen := n.Load(); seen > int64(a+b) {
		t.Fatalf("server saw %d requests, the loops sent %d", seen, a+b)
	}
}

func TestStartRejectsUnboundedLoops(t *testing.T) {
	nop := func(context.Context) (string, error) { return "", nil }
	ok := Options{Clients: 1, MaxTime: time.Second, MaxTotal: 1}
	for field, o := range map[string]Options{
		"Clients":  {MaxTime: time.Second, MaxTotal: 1},
		"MaxTotal": {Clients: 1, MaxTime: time.Second},
		"MaxTime":  {Clients: 1, MaxTotal: 1},
		"Pause":    {Clients: 1, MaxTime: time.Second, MaxTotal: 1, Pause: -1},
	} {
		if _, err := Start(context.Background(), o, nop); err == nil || !strings.Contains(err.Error(), field) {
			t.Errorf("%s: Start = %v, want an error naming it", field, err)
		}
	}
	l, err := Start(context.Background(), ok, nop)
	if err != nil {
		t.Fatal(err)
	}
	l.End()
}

func TestHelloReplica(t *testing.T) {
	for body, want := range map[string]string{
		"hello from res-3-0a1b2c3d (request 12)\n": "res-3-0a1b2c3d",
		"v2 from res-4-00ff00ff (request 1)\n":     "res-4-00ff00ff",
		"nothing here":                             "",
	} {
		if got := HelloReplica(body); got != want {
			t.Errorf("HelloReplica(%q) = %q, want %q", body, got, want)
		}
	}
}
