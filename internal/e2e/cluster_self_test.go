package e2e

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/shoal-run/shoal/internal/api/types"
)

// TestClusterSelfAPI: a replica pinned to a follower calls the self API
// on its own node's bridge; the follower relays the call to the leader,
// which holds the replica's token, and the call takes effect (a second
// replica, on the same follower). A forged token is refused on the way.
func TestClusterSelfAPI(t *testing.T) {
	c := startClusterWith(t, 3, false, "--self-api-port", "7070")
	c.helloEverywhere()
	lead := c.leaderNode()
	var on *clusterNode
	for _, nd := range c.nodes {
		if nd != lead {
			on = nd
			break
		}
	}
	manifest := "name = \"web\"\nimage = \"hello:1\"\nport = 8080\n[scale]\nmin = 1\nmax = 2\nidle_timeout = \"1m\"\n" +
		"[health]\nhttp = \"/healthz\"\n[placement]\nnodes = [\"" + on.name + "\"]\n"
	f := filepath.Join(t.TempDir(), "shoal.toml")
	if err := os.WriteFile(f, []byte(manifest), 0o644); err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(30 * time.Second)
	for {
		r := lead.shoal("app", "deploy", "-f", f, "--detach")
		if r.code == 0 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("deploy on leader %s: exit %d: %s", lead.name, r.code, r.stderr)
		}
		time.Sleep(200 * time.Millisecond)
	}
	a := lead.waitApp("one ready replica on "+on.name, "web", func(a types.App) bool { return readyByNode(a)[on.name] == 1 })
	x := asReplica(t, a, readyIDs(a)[0])

	selfCall(t, x.url, strings.Repeat("A", 43), x.pid, "GET", "/v1/self", "").expect(t, "forged token through "+on.name, 401, "unauthorized")
	self := x.call(t, "GET", "/v1/self", "")
	self.expect(t, "GET /v1/self through "+on.name, 200, "")
	if self.str("id") != x.id || self.str("app") != "web" {
		t.Fatalf("GET /v1/self through %s: %s", on.name, self.raw)
	}
	ans := x.call(t, "POST", "/v1/self/replicate", "")
	ans.expect(t, "replicate through "+on.name, 200, "")
	second := ans.str("replica", "id")
	if second == "" || second == x.id {
		t.Fatalf("replicate answered %s", ans.raw)
	}
	lead.waitApp("two ready replicas on "+on.name, "web", func(a types.App) bool { return readyByNode(a)[on.name] == 2 })
	x.call(t, "POST", "/v1/self/replicate", "").expect(t, "replicate beyond max through "+on.name, 409, "max")
}
