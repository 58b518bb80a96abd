package agent

import (
	"context"
	"fmt"
	"net"
	"net/http"
	"strings"
	"sync"
	"testing"

	"github.com/shoal-run/shoal/internal/appapi"
)

// leaderSelf stands in for the leader's controllers behind its real self
// API: it knows two replicas' tokens and records the calls it acts on.
type leaderSelf struct {
	mu    sync.Mutex
	known map[string]appapi.Caller // by token hash
	acted []string
}

func (p *leaderSelf) Identify(hash string) (appapi.Caller, bool) {
	c, ok := p.known[hash]
	return c, ok
}

func (p *leaderSelf) act(s string) {
	p.mu.Lock()
	p.acted = append(p.acted, s)
	p.mu.Unlock()
}

func (p *leaderSelf) Replicate(ctx context.Context, c appapi.Caller, wait bool) (appapi.Result, error) {
	p.act("replicate " + c.Replica)
	return appapi.Result{Replica: appapi.Replica{ID: c.Replica + "-new"}, How: "started"}, nil
}

func (p *leaderSelf) Halt(ctx context.Context, c appapi.Caller) (appapi.Result, error) {
	p.act("halt " + c.Replica)
	return appapi.Result{Replica: appapi.Replica{ID: c.Replica}, How: "halted"}, nil
}

func (p *leaderSelf) Die(ctx context.Context, c appapi.Caller) (appapi.Result, error) {
	p.act("die " + c.Replica)
	return appapi.Result{Replica: appapi.Replica{ID: c.Replica}, How: "draining"}, nil
}

func (p *leaderSelf) Metric(ctx context.Context, c appapi.Caller, name string, value float64) error {
	p.act(fmt.Sprintf("metric %s %s=%g", c.Replica, name, value))
	return nil
}

func (p *leaderSelf) Self(ctx context.Context, c appapi.Caller) (appapi.Self, error) {
	return appapi.Self{ID: c.Replica, App: c.App}, nil
}

// followerSelf is a follower's (n2's) self API: the real handler, with no
// replicas of its own, behind the relay to the leader.
func followerSelf(t *testing.T, c *Client) http.Handler {
	t.Helper()
	f := &Forwarder{Client: c, Self: "n2", Log: testLog(t),
		Leader: func(context.Context) (string, error) { return "n1", nil }}
	own := (&appapi.Server{Platform: &leaderSelf{}, Node: "n2"}).Handler()
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if !f.ForwardSelf(w, r) {
			own.ServeHTTP(w, r)
		}
	})
}

// A replica on a follower calls the self API of its own node; the call
// reaches the leader over the agent, the replica's token with it, and the
// leader acts on it as on a call of its own. A wrong token, or the token
// of a replica on another node, is refused there as it would be on the
// leader's own bridge, whatever node the replica claims to be on.
func TestSelfCallsRelayedToLeader(t *testing.T) {
	st := testStore(t)
	lo := net.IPv4(127, 0, 0, 1)
	plat := &leaderSelf{known: map[string]appapi.Caller{
		appapi.HashToken("tok-on-n2"): {App: "web", Replica: "r2", IP: lo, Node: "n2"},
		appapi.HashToken("tok-on-n3"): {App: "web", Replica: "r3", IP: lo, Node: "n3"},
	}}
	selfAPI := (&appapi.Server{Platform: plat, Node: "n1"}).Handler()
	leaderSrv := serve(t, (&Server{Name: "n1", Secret: testSecret, Self: selfAPI, Log: testLog(t)}).Handler())
	addNode(t, st, "n1", leaderSrv)
	follower := serve(t, followerSelf(t, NewClient(st, testSecret)))

	code, body := send(t, follower.URL, "POST", "/v1/self/metrics", "tok-on-n2", `{"name":"queue_depth","value":7}`)
	if code != http.StatusOK || !strings.Contains(body, "queue_depth") {
		t.Fatalf("metric through the follower: %d %s", code, body)
	}
	code, body = send(t, follower.URL, "POST", "/v1/self/replicate", "tok-on-n2", `{}`)
	if code/100 != 2 || !strings.Contains(body, "r2-new") {
		t.Fatalf("replicate through the follower: %d %s", code, body)
	}
	code, body = send(t, follower.URL, "GET", "/v1/self", "tok-on-n2", "")
	if code != http.StatusOK || !strings.Contains(body, `"id":"r2"`) {
		t.Fatalf("get through the follower: %d %s", code, body)
	}

	if code, body := send(t, follower.URL, "POST", "/v1/self/halt", "forged", `{}`); code != http.StatusUnauthorized {
		t.Fatalf("a wrong token through the follower: %d %s", code, body)
	}
	if code, body := send(t, follower.URL, "POST", "/v1/self/halt", "", `{}`); code != http.StatusUnauthorized {
		t.Fatalf("no token through the follower: %d %s", code, body)
	}
	// n3's replica's token, used on n2 (claiming n3 in the relay's own
	// headers changes nothing: n2 sets them).
	req, _ := http.NewRequest("POST", follower.URL+"/v1/self/die", strings.NewReader(`{}`))
	req.Header.Set("Authorization", "Bearer tok-on-n3")
	req.Header.Set(selfNodeHeader, "n3")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusForbidden {
		t.Fatalf("n3's token used on n2: %d, want 403", resp.StatusCode)
	}
	// n2's replica's token on the leader's own bridge.
	direct := serve(t, selfAPI)
	if code, body := send(t, direct.URL, "POST", "/v1/self/halt", "tok-on-n2", `{}`); code != http.StatusForbidden {
		t.Fatalf("n2's token used on n1 itself: %d %s", code, body)
	}
	// The relay's route is behind the cluster secret like every other.
	if code, body := send(t, leaderSrv.URL, "POST", selfPrefix+"/v1/self/halt", "tok-on-n2", `{}`); code != http.StatusUnauthorized {
		t.Fatalf("relay route without the cluster secret: %d %s", code, body)
	}

	plat.mu.Lock()
	defer plat.mu.Unlock()
	want := "metric r2 queue_depth=7,replicate r2"
	if got := strings.Join(plat.acted, ","); got != want {
		t.Fatalf("the leader acted on %q, want %q", got, want)
	}
}
