package agent

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"strings"
	"sync"
	"testing"

	"github.com/shoal-run/shoal/internal/api"
)

// leaderAPI stands in for the leader's API handler: it records what it
// serves and answers with the method, path and body it got.
type leaderAPI struct {
	mu   sync.Mutex
	seen []string
}

func (l *leaderAPI) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	b, _ := io.ReadAll(r.Body)
	l.mu.Lock()
	l.seen = append(l.seen, fmt.Sprintf("%s %s?%s auth=%q body=%s", r.Method, r.URL.Path, r.URL.RawQuery, r.Header.Get("Authorization"), b))
	l.mu.Unlock()
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(http.StatusCreated)
	fmt.Fprintf(w, `{"served":%q}`, r.Method+" "+r.URL.Path)
}

// followerAPI is a follower's API (behind the user token userTok) whose
// app requests go to the leader named by leader.
func followerAPI(t *testing.T, c *Client, leader *string) *http.Server {
	t.Helper()
	f := &Forwarder{Client: c, Self: "n2", Log: testLog(t),
		Leader: func(context.Context) (string, error) { return *leader, nil }}
	srv := &api.Server{Logger: testLog(t), Forward: f.Forward}
	return &http.Server{Handler: srv.Handler(userTok)}
}

const userTok = "user-token-0123456789"

func send(t *testing.T, url, method, path, tok, body string) (int, string) {
	t.Helper()
	req, _ := http.NewRequest(method, url+path, strings.NewReader(body))
	if tok != "" {
		req.Header.Set("Authorization", "Bearer "+tok)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b)
}

// A follower's app requests, checked against the user's token where they
// come in, reach the leader's API with the cluster secret instead, and the
// leader's answer comes back as it is. Other requests stay on the
// follower; a wake-up stays there too.
func TestForwardAppRequestsToLeader(t *testing.T) {
	st := testStore(t)
	lapi := &leaderAPI{}
	leaderSrv := serve(t, (&Server{Name: "n1", Secret: testSecret, API: lapi, Log: testLog(t)}).Handler())
	addNode(t, st, "n1", leaderSrv)
	leader := "n1"
	fs := followerAPI(t, NewClient(st, testSecret), &leader)
	follower := serve(t, fs.Handler)

	if code, body := send(t, follower.URL, "POST", "/v1/apps", "", `{"name":"web"}`); code != http.StatusUnauthorized {
		t.Fatalf("without the user token: %d %s", code, body)
	}
	code, body := send(t, follower.URL, "POST", "/v1/apps?wait=1", userTok, `{"name":"web"}`)
	if code != http.StatusCreated || body != `{"served":"POST /v1/apps"}` {
		t.Fatalf("deploy through the follower: %d %s", code, body)
	}
	if code, _ := send(t, follower.URL, "DELETE", "/v1/apps/web", userTok, ""); code != http.StatusCreated {
		t.Fatalf("remove through the follower: %d", code)
	}
	if code, _ := send(t, follower.URL, "GET", "/v1/apps/web/logs", userTok, ""); code != http.StatusCreated {
		t.Fatalf("logs through the follower: %d", code)
	}
	// Not app requests: the follower's own (here 404/405 from a bare API).
	send(t, follower.URL, "POST", "/v1/apps/web/activate", userTok, "")
	send(t, follower.URL, "GET", "/v1/nothing", userTok, "")
	want := []string{
		`POST /v1/apps?wait=1 auth="Bearer ` + testSecret + `" body={"name":"web"}`,
		`DELETE /v1/apps/web? auth="Bearer ` + testSecret + `" body=`,
		`GET /v1/apps/web/logs? auth="Bearer ` + testSecret + `" body=`,
	}
	if fmt.Sprint(lapi.seen) != fmt.Sprint(want) {
		t.Fatalf("the leader served:\n got %q\nwant %q", lapi.seen, want)
	}

	// While this node leads, it serves its app requests itself.
	leader = "n2"
	if code, _ := send(t, follower.URL, "GET", "/v1/apps", userTok, ""); code == http.StatusCreated {
		t.Fatal("the leader forwarded to another node")
	}
	// No leader elected: 503, saying so.
	leader = ""
	if code, body := send(t, follower.URL, "GET", "/v1/apps", userTok, ""); code != http.StatusServiceUnavailable || !strings.Contains(body, "no leader") {
		t.Fatalf("no leader: %d %s", code, body)
	}
	// A leader that does not answer: 503 naming it.
	leader = "n1"
	leaderSrv.Close()
	if code, body := send(t, follower.URL, "GET", "/v1/apps", userTok, ""); code != http.StatusServiceUnavailable || !strings.Contains(body, "leader n1") {
		t.Fatalf("leader gone: %d %s", code, body)
	}
	if len(lapi.seen) != 3 {
		t.Fatalf("the leader served %d requests; want 3", len(lapi.seen))
	}
}

// The leader serves forwarded requests only with the cluster secret, and
// only app requests: nothing else of its API is reachable that way.
func TestForwardedOnlyAppsWithSecret(t *testing.T) {
	lapi := &leaderAPI{}
	srv := serve(t, (&Server{Name: "n1", Secret: testSecret, API: lapi, Log: testLog(t)}).Handler())
	if code, _ := send(t, srv.URL, "POST", apiPrefix+"/v1/apps", "", "{}"); code != http.StatusUnauthorized {
		t.Fatalf("without the secret: %d", code)
	}
	if code, _ := send(t, srv.URL, "POST", apiPrefix+"/v1/apps", userTok, "{}"); code != http.StatusUnauthorized {
		t.Fatalf("with the user token: %d", code)
	}
	for _, p := range []string{"/v1/containers/run", "/v1/images/import", "/v1/appsx", "/v1/apps/web/activate", "/../v1/containers/run"} {
		if code, body := send(t, srv.URL, "POST", apiPrefix+p, testSecret, "{}"); code != http.StatusNotFound {
			t.Errorf("%s forwarded: %d %s; want 404", p, code, body)
		}
	}
	if len(lapi.seen) != 0 {
		t.Fatalf("the API served %q", lapi.seen)
	}
	if code, _ := send(t, srv.URL, "PUT", apiPrefix+"/v1/apps/web/traffic", testSecret, "{}"); code != http.StatusCreated || len(lapi.seen) != 1 {
		t.Fatalf("an app request with the secret: %d, %q", code, lapi.seen)
	}
}
