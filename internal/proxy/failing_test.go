package proxy

import (
	"strings"
	"testing"
	"time"

	"github.com/shoal-run/shoal/internal/clock"
)

// A request for an app whose route says it is failing (no replica ready,
// starting or frozen; the next start after its back-off) is answered 503
// at once, with the reason and Retry-After the seconds until that start;
// one that a start or a thaw may serve, or that comes after the back-off,
// is held as before. A request held before the route said so is answered
// when it does.
func TestFailingAppAnsweredAtOnce(t *testing.T) {
	fake := clock.NewFake(time.Unix(1000, 0))
	f := newFront(t, Options{Activator: newActivator(), Clock: fake})
	r := coldRoute("a")
	r.Failing = `replica a-1 exited with code 1`
	r.RetryAt = fake.Now().Add(4200 * time.Millisecond)
	f.p.SetRoute(r)
	code, body, h := f.get(t, "a.localhost", "/")
	if code != 503 || h.Get("Retry-After") != "5" {
		t.Fatalf("request to a failing app: %d, Retry-After %q, want 503 and 5", code, h.Get("Retry-After"))
	}
	if e := apiError(t, body); !strings.Contains(e.Error, "exited with code 1") || !strings.Contains(e.Error, "next start is in 5s") {
		t.Fatalf("error %q, want the reason and the next start", e.Error)
	}

	for _, c := range []struct {
		name             string
		starting, frozen int
		after            time.Duration
	}{
		{"a start under way", 1, 0, 0},
		{"a frozen replica", 0, 1, 0},
		{"the back-off over", 0, 0, 5 * time.Second},
	} {
		t.Run(c.name, func(t *testing.T) {
			r := r
			r.Starting, r.Frozen, r.RetryAt = c.starting, c.frozen, fake.Now().Add(4200*time.Millisecond-c.after)
			f.p.SetRoute(r)
			done := f.goDo(f.req(t, "GET", "a.localhost", "/", nil))
			eventually(t, "the request to queue", func() bool { return f.p.Load("a").Queued == 1 })
			r.Starting, r.Frozen, r.RetryAt = 0, 0, fake.Now().Add(2*time.Second)
			f.p.SetRoute(r)
			res := recv(t, done, "the held request once the route says the app is failing")
			if res.code != 503 || res.header.Get("Retry-After") == "" {
				t.Fatalf("held request: %+v, want 503 with Retry-After", res)
			}
		})
	}
}
