package agent

import (
	"context"
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"runtime"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/shoal-run/shoal/internal/errdefs"
)

// fakeLive is a live set the test changes.
type fakeLive struct {
	mu    sync.Mutex
	asked int // calls of Nodes
	nodes []string
	ready chan struct{}
	subs  []chan struct{}
}

func newFakeLive(nodes ...string) *fakeLive {
	l := &fakeLive{nodes: nodes, ready: make(chan struct{})}
	close(l.ready)
	return l
}

func (l *fakeLive) Nodes() []string {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.asked++
	return slices.Clone(l.nodes)
}

// askedTimes returns how often Nodes was called.
func (l *fakeLive) askedTimes() int {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.asked
}

func (l *fakeLive) Ready() <-chan struct{} { return l.ready }

func (l *fakeLive) Changed() <-chan struct{} {
	l.mu.Lock()
	defer l.mu.Unlock()
	ch := make(chan struct{}, 1)
	l.subs = append(l.subs, ch)
	return ch
}

// drop takes node out of the set and tells the subscribers.
func (l *fakeLive) drop(node string) {
	l.set(func(nodes []string) []string {
		return slices.DeleteFunc(nodes, func(n string) bool { return n == node })
	})
}

// add puts node in the set and tells the subscribers.
func (l *fakeLive) add(node string) {
	l.set(func(nodes []string) []string { return append(nodes, node) })
}

func (l *fakeLive) set(change func([]string) []string) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.nodes = change(l.nodes)
	for _, ch := range l.subs {
		select {
		case ch <- struct{}{}:
		default:
		}
	}
}

// silent is a node that takes requests and never answers, as one cut off
// without a word: entered gets a value when a request arrives, gaveUp when
// its caller gives it up; at the test's end it lets go of the rest.
type silent struct {
	entered chan struct{}
	gaveUp  chan struct{}
	end     chan struct{}
}

// newSilent returns a silent node; serveSilent serves it.
func newSilent() *silent {
	return &silent{entered: make(chan struct{}, 8), gaveUp: make(chan struct{}, 8), end: make(chan struct{})}
}

// serveSilent serves h, which holds requests on s, until the test ends.
func serveSilent(t *testing.T, s *silent, h http.Handler) *httptest.Server {
	srv := serve(t, h)
	t.Cleanup(func() { close(s.end) }) // runs before srv closes
	return srv
}

func (s *silent) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	s.entered <- struct{}{}
	select {
	case <-r.Context().Done():
		s.gaveUp <- struct{}{}
	case <-s.end:
	}
}

// within waits for ch, failing the test if nothing comes (a call that
// hangs is the failure this guards against).
func within(t *testing.T, what string, ch <-chan struct{}) {
	t.Helper()
	select {
	case <-ch:
	case <-time.After(10 * time.Second):
		t.Fatalf("%s: nothing after 10s", what)
	}
}

// A call to a node that stops answering ends, unavailable, once the node
// leaves the live set; a node not in the set yet known is not cut.
func TestCallEndsWhenNodeLeavesLiveSet(t *testing.T) {
	st := testStore(t)
	peer := newSilent()
	addNode(t, st, "n2", serveSilent(t, peer, guard(testSecret, testLog(t), peer)))
	live := newFakeLive("n1", "n2")
	c := NewClient(st, testSecret)
	c.Live = live
	errc := make(chan error, 1)
	go func() { errc <- c.call(context.Background(), "n2", http.MethodPost, "x", nil, nil) }()
	within(t, "the call reaching n2", peer.entered)
	live.drop("n2")
	var err error
	select {
	case err = <-errc:
	case <-time.After(10 * time.Second):
		t.Fatal("the call to a node that left the live set did not end")
	}
	if !errors.Is(err, errdefs.ErrUnavailable) || !strings.Contains(err.Error(), "n2 left the cluster's live nodes") {
		t.Fatalf("call to a lost node: %v; want unavailable, saying it left", err)
	}
	within(t, "n2 seeing the call given up", peer.gaveUp)

	// While the live set is not known, no node is taken for lost.
	unknown := &fakeLive{ready: make(chan struct{})}
	c2 := NewClient(st, testSecret)
	c2.Live = unknown
	addNode(t, st, "n3", serve(t, (&Server{Name: "n3", Secret: testSecret}).Handler()))
	if _, err := c2.Ping(context.Background(), "n3"); err != nil {
		t.Fatalf("ping before the live set is known: %v", err)
	}
}

// A follower's forward to a leader that stops answering ends with 503
// naming the leader once the leader leaves the live set.
func TestForwardEndsWhenLeaderIsLost(t *testing.T) {
	st := testStore(t)
	peer := newSilent()
	addNode(t, st, "n1", serveSilent(t, peer, (&Server{Name: "n1", Secret: testSecret, API: peer, Log: testLog(t)}).Handler()))
	live := newFakeLive("n1", "n2")
	c := NewClient(st, testSecret)
	c.Live = live
	leader := "n1"
	follower := serve(t, followerAPI(t, c, &leader).Handler)
	type answer struct {
		code int
		body string
	}
	got := make(chan answer, 1)
	go func() {
		req, _ := http.NewRequest(http.MethodDelete, follower.URL+"/v1/apps/web", nil)
		req.Header.Set("Authorization", "Bearer "+userTok)
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			got <- answer{0, err.Error()}
			return
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		got <- answer{resp.StatusCode, string(b)}
	}()
	within(t, "the forward reaching the leader", peer.entered)
	live.drop("n1")
	select {
	case a := <-got:
		if a.code != http.StatusServiceUnavailable || !strings.Contains(a.body, "leader n1") || !strings.Contains(a.body, "left the cluster's live nodes") {
			t.Fatalf("forward to a lost leader: %d %s; want 503 saying n1 left", a.code, a.body)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("the forward to a leader that left the live set did not end")
	}
	within(t, "the leader seeing the forward given up", peer.gaveUp)
}

// A call to a node not seen live yet (it joins, its heartbeat not in the
// set here yet) is not cut by a change of the set; once seen live, its
// leaving ends the call.
func TestCallToNodeNotSeenLiveYet(t *testing.T) {
	live := newFakeLive("n1", "n2")
	c := NewClient(testStore(t), testSecret)
	c.Live = live
	ctx, release := c.whileLive(context.Background(), "n4")
	defer release()
	// Each change is looked at with one Nodes call; the call after the
	// next change shows the one before did not end the watch.
	step := func(what string, change func()) {
		t.Helper()
		n := live.askedTimes()
		change()
		deadline := time.Now().Add(10 * time.Second)
		for live.askedTimes() <= n {
			if time.Now().After(deadline) {
				t.Fatalf("%s: the live set was not looked at again", what)
			}
			time.Sleep(time.Millisecond)
		}
	}
	within(t, "the first look at the live set", func() <-chan struct{} {
		ch := make(chan struct{})
		go func() {
			for live.askedTimes() == 0 {
				time.Sleep(time.Millisecond)
			}
			close(ch)
		}()
		return ch
	}())
	step("n2 leaves", func() { live.drop("n2") })
	step("n2 back", func() { live.add("n2") })
	if err := ctx.Err(); err != nil {
		t.Fatalf("a call to n4, not seen live yet, ended: %v", context.Cause(ctx))
	}
	step("n4 joins", func() { live.add("n4") })
	live.drop("n4")
	within(t, "the call to n4 ending once it left", ctx.Done())
	if err := context.Cause(ctx); !errors.Is(err, errdefs.ErrUnavailable) {
		t.Fatalf("cause %v; want unavailable", err)
	}
}

// A call whose node closes the connection without an answer (its daemon
// killed) while the node is still in the live set is unavailable, naming
// the node: not the bare "context canceled" of the call's own release,
// which a health check would count as a failed replica rather than a
// lost node.
func TestCallToClosedNodeIsUnavailable(t *testing.T) {
	st := testStore(t)
	hangUp := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		conn, _, err := http.NewResponseController(w).Hijack()
		if err != nil {
			t.Errorf("hijack: %v", err)
			return
		}
		conn.Close()
	})
	addNode(t, st, "n2", serve(t, hangUp))
	c := NewClient(st, testSecret)
	c.Live = newFakeLive("n1", "n2")
	for range 3 { // the first may meet a fresh connection, the others a reused one
		err := c.call(context.Background(), "n2", http.MethodPost, "x", nil, nil)
		if err == nil {
			t.Fatal("call to a node that hangs up: no error")
		}
		if errors.Is(err, context.Canceled) || !errors.Is(err, errdefs.ErrUnavailable) || !strings.Contains(err.Error(), "node n2") {
			t.Fatalf("call to a node that hangs up: %v; want unavailable naming n2, not canceled", err)
		}
	}
}

// Whether the node is live is seen when the call begins: a node that
// leaves before the watching goroutine first runs (one processor, so it
// runs only once the caller waits) still ends the call.
func TestCallEndsWhenNodeLeavesAtOnce(t *testing.T) {
	defer runtime.GOMAXPROCS(runtime.GOMAXPROCS(1))
	live := newFakeLive("n1", "n2")
	c := NewClient(testStore(t), testSecret)
	c.Live = live
	ctx, release := c.whileLive(context.Background(), "n2")
	defer release()
	live.drop("n2")
	select {
	case <-ctx.Done():
	case <-time.After(10 * time.Second):
		t.Fatal("the call to a node that left the live set at once did not end")
	}
	if err := context.Cause(ctx); !errors.Is(err, errdefs.ErrUnavailable) {
		t.Fatalf("cause %v, want unavailable", err)
	}
}
