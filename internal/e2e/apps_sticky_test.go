package e2e

import (
	"io"
	"net/http"
	"strings"
	"sync"
	"syscall"
	"testing"

	"github.com/shoal-run/shoal/internal/api/types"
	"github.com/shoal-run/shoal/internal/route"
)

// stickyAnswer is one answer to a client that keeps the sticky cookie.
type stickyAnswer struct {
	replica string // hello's X-Replica
	cookie  string // the shoal-replica cookie the answer set, if any
	failure string // not 200, or no answer
}

// stickyClient sends requests one after the other with the last
// shoal-replica cookie it was given, as a browser would, until stopped or
// until limit requests.
type stickyClient struct {
	stop    chan struct{}
	done    sync.WaitGroup
	mu      sync.Mutex
	answers []stickyAnswer
}

func startSticky(proxyAddr, app, cookie string, limit int) *stickyClient {
	c := &stickyClient{stop: make(chan struct{})}
	c.done.Add(1)
	go func() {
		defer c.done.Done()
		for i := 0; i < limit; i++ {
			select {
			case <-c.stop:
				return
			default:
			}
			a := askSticky(proxyAddr, app, cookie)
			if a.cookie != "" {
				cookie = a.cookie
			}
			c.mu.Lock()
			c.answers = append(c.answers, a)
			c.mu.Unlock()
		}
	}()
	return c
}

// count is how many answers came so far.
func (c *stickyClient) count() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return len(c.answers)
}

// end stops the client and returns its answers.
func (c *stickyClient) end() []stickyAnswer {
	close(c.stop)
	c.done.Wait()
	return c.answers
}

// askSticky sends GET / to app with the sticky cookie (none when empty).
func askSticky(proxyAddr, app, cookie string) stickyAnswer {
	req, err := http.NewRequest(http.MethodGet, "http://"+proxyAddr+"/", nil)
	if err != nil {
		return stickyAnswer{failure: err.Error()}
	}
	req.Host = app + ".localhost"
	if cookie != "" {
		req.AddCookie(&http.Cookie{Name: route.StickyCookie, Value: cookie})
	}
	resp, err := client.Do(req)
	if err != nil {
		return stickyAnswer{failure: err.Error()}
	}
	defer resp.Body.Close()
	var b strings.Builder
	_, err = io.Copy(&b, resp.Body)
	a := stickyAnswer{replica: resp.Header.Get("X-Replica")}
	for _, ck := range resp.Cookies() {
		if ck.Name == route.StickyCookie {
			a.cookie = ck.Value
		}
	}
	switch {
	case err != nil:
		a.failure = "reading the body: " + err.Error()
	case resp.StatusCode != 200:
		a.failure = resp.Status + ": " + strings.TrimSpace(b.String())
	}
	return a
}

// An app deployed with [traffic] sticky = true: a client that keeps its
// shoal-replica cookie stays on its replica, with no failed request and no
// new cookie, while the app scales out and a new replica joins the route;
// when its replica is killed, the client moves to another replica with a
// new cookie and stays there.
func TestAppStickyScaleOutAndKill(t *testing.T) {
	d := startDaemon(t)
	d.exampleImage("hello")
	if r, _ := d.deployFile(revManifest(2, "hi", "[traffic]\nsticky = true")); r.code != 0 {
		t.Fatalf("deploy: %d %s", r.code, r.stderr)
	}
	a := d.waitApp("hello", "two ready", func(a types.App) bool { return a.Ready == 2 })
	if !a.Sticky {
		t.Fatalf("app deployed with [traffic] sticky = true is not sticky: %+v", a)
	}
	before := pids(a, 1, "ready")
	proxyAddr := d.proxyAddr()
	first := askSticky(proxyAddr, "hello", "")
	if first.failure != "" || first.replica == "" || first.cookie != first.replica {
		t.Fatalf("first answer: %+v; want a shoal-replica cookie naming the replica that answered", first)
	}
	home := first.replica

	const limit = 20000
	c := startSticky(proxyAddr, "hello", first.cookie, limit)
	stopped := false
	defer func() {
		if !stopped {
			c.end()
		}
	}()
	waitFor(t, "the sticky client's first answers", func() bool { return c.count() >= 50 })
	d.must("app", "scale", "hello", "--min", "3", "--max", "3")
	a = d.waitApp("hello", "a third replica is ready", func(a types.App) bool { return a.Ready == 3 })
	grown := c.count()
	var fresh string
	for id := range pids(a, 1, "ready") {
		if _, ok := before[id]; !ok {
			fresh = id
		}
	}
	// The new replica is in the route: clients without a cookie reach it.
	if failed, msg, by := burst(t, proxyAddr, "hello", "/", 60); failed != 0 || by[fresh] == 0 {
		t.Fatalf("60 requests without a cookie: %d failed (%s), by replica %v; want some to the new replica %s", failed, msg, by, fresh)
	}
	waitFor(t, "300 answers after the scale-out", func() bool { return c.count() >= grown+300 })

	// Kill the client's replica: it leaves the route at once.
	var pid int
	for _, r := range a.Replicas {
		if r.ID == home {
			pid = r.Pid
		}
	}
	if pid == 0 {
		t.Fatalf("replica %s has no pid: %+v", home, a.Replicas)
	}
	killedAt := c.count()
	if err := syscall.Kill(pid, syscall.SIGKILL); err != nil {
		t.Fatalf("kill replica %s (pid %d): %v", home, pid, err)
	}
	waitFor(t, "300 answers after the kill", func() bool { return c.count() >= killedAt+300 })
	answers := c.end()
	stopped = true
	if len(answers) >= limit {
		t.Fatalf("the client reached its limit of %d requests before the test was done", limit)
	}

	// Up to the kill: every answer from home, none with a cookie.
	for i, an := range answers[:killedAt] {
		if an.failure != "" || an.replica != home || an.cookie != "" {
			t.Fatalf("answer %d of %d before the kill (scale-out after %d): %+v; want 200 from %s without a cookie",
				i+1, killedAt, grown, an, home)
		}
	}
	// After it: home until the kill lands (a request in flight then may
	// fail), then another replica with a new cookie naming it, then that
	// one with no new cookie.
	failed, moved, next := 0, -1, ""
	for i, an := range answers[killedAt:] {
		switch {
		case an.failure != "":
			if failed++; failed > 1 {
				t.Fatalf("answer %d after the kill failed (the second to): %s", i+1, an.failure)
			}
		case next == "" && an.replica == home:
			if an.cookie != "" {
				t.Fatalf("answer %d after the kill, from %s, set a cookie %q", i+1, home, an.cookie)
			}
		case next == "":
			if an.cookie != an.replica {
				t.Fatalf("first answer %d from another replica (%s) set the cookie %q; want one naming it", i+1, an.replica, an.cookie)
			}
			next, moved = an.replica, i
		case an.replica != next || an.cookie != "":
			t.Fatalf("answer %d after the kill: %+v; want 200 from %s without a cookie", i+1, an, next)
		}
	}
	if next == "" {
		t.Fatalf("the client never moved off the killed replica %s in %d answers", home, len(answers)-killedAt)
	}
	t.Logf("sticky on %s for %d answers (a third replica ready after %d); moved to %s at answer %d after the kill, %d failed; %d answers in all",
		home, killedAt, grown, next, moved+1, failed, len(answers))
}
