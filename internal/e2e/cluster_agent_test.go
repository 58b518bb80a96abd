package e2e

import (
	"context"
	"encoding/json"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/shoal-run/shoal/internal/agent"
	"github.com/shoal-run/shoal/internal/api/types"
	"github.com/shoal-run/shoal/internal/cluster/clustertest"
	"github.com/shoal-run/shoal/internal/errdefs"
	mf "github.com/shoal-run/shoal/internal/manifest"
	"github.com/shoal-run/shoal/internal/node"
	"github.com/shoal-run/shoal/internal/store"
)

// etcdStore opens the cluster's store on every etcd member; the caller
// closes it.
func (c *testCluster) etcdStore() store.Store {
	c.t.Helper()
	var eps []string
	for _, m := range c.etcd {
		eps = append(eps, "http://"+m.client)
	}
	st, err := store.OpenEtcd(context.Background(), eps)
	if err != nil {
		c.t.Fatal(err)
	}
	return st
}

// clusterSecret reads the secret the nodes made in the store.
func (c *testCluster) clusterSecret() string {
	t := c.t
	t.Helper()
	st := c.etcdStore()
	defer st.Close()
	kv, err := st.Get(context.Background(), store.ClusterSecretKey)
	if err != nil {
		t.Fatalf("cluster secret: %v", err)
	}
	return string(kv.Value)
}

// agentGet asks nd's agent for path over its advertised address.
func (nd *clusterNode) agentGet(path, token string) (int, string) {
	t := nd.c.t
	t.Helper()
	req, _ := http.NewRequest(http.MethodGet, "http://"+nd.ip+":7070/v1/agent/"+path, nil)
	if token != "" {
		req.Header.Set("Authorization", "Bearer "+token)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatalf("agent of %s: %v", nd.name, err)
	}
	defer resp.Body.Close()
	var b strings.Builder
	var v map[string]any
	json.NewDecoder(resp.Body).Decode(&v)
	enc := json.NewEncoder(&b)
	enc.Encode(v)
	return resp.StatusCode, b.String()
}

// The nodes of a cluster agree on one secret, made once in the store; each
// serves its agent on its advertised address behind that secret and
// refuses a request without it, or with the user API's token.
func TestClusterAgentSecret(t *testing.T) {
	c := startCluster(t, 2)
	secret := c.clusterSecret()
	if len(secret) != 64 {
		t.Fatalf("cluster secret %q: want 64 hex digits", secret)
	}
	for _, nd := range c.nodes {
		code, body := nd.agentGet("ping", secret)
		if code != http.StatusOK || !strings.Contains(body, `"node":"`+nd.name+`"`) {
			t.Fatalf("ping %s with the secret: %d %s", nd.name, code, body)
		}
		if code, body := nd.agentGet("ping", ""); code != http.StatusUnauthorized {
			t.Fatalf("ping %s without the secret: %d %s; want 401", nd.name, code, body)
		}
		if code, body := nd.agentGet("ping", secret[:63]+"x"); code != http.StatusUnauthorized {
			t.Fatalf("ping %s with a wrong secret: %d %s; want 401", nd.name, code, body)
		}
		apiTok, err := os.ReadFile(filepath.Join(nd.dataDir, "api-token"))
		if err != nil {
			t.Fatalf("API token of %s: %v", nd.name, err)
		}
		if code, body := nd.agentGet("ping", strings.TrimSpace(string(apiTok))); code != http.StatusUnauthorized {
			t.Fatalf("ping %s with the user API token: %d %s; want 401", nd.name, code, body)
		}
	}
	if out := c.nodes[0].shoal("info").stdout; !strings.Contains(out, "reach its agent and images there with the cluster secret kept in the store") {
		t.Fatalf("info does not say where the node's secret comes from:\n%s", out)
	}
	// Restarted, a node reads the same secret back.
	n2 := c.nodes[1]
	n2.kill()
	n2.start()
	if got := c.clusterSecret(); got != secret {
		t.Fatalf("secret changed across a restart: %q → %q", secret, got)
	}
	if code, body := n2.agentGet("ping", secret); code != http.StatusOK {
		t.Fatalf("ping restarted %s: %d %s", n2.name, code, body)
	}
}

// agentClient is an agent client of the cluster, as another node has it.
func (c *testCluster) agentClient() (*agent.Client, func()) {
	c.t.Helper()
	st := c.etcdStore()
	return agent.NewClient(st, c.clusterSecret()), func() { st.Close() }
}

// buildImage builds example app name into nd's image store as name:1 and
// returns its digest.
func (nd *clusterNode) buildImage(name string) string {
	t := nd.c.t
	t.Helper()
	dir := filepath.Join(examples(t), name)
	if r := nd.shoal("image", "build", dir, "--tag", name+":1", "--entrypoint", "/"+name, "--port", "8080"); r.code != 0 {
		t.Fatalf("image build on %s: %s", nd.name, r.stderr)
	}
	r := nd.shoal("image", "inspect", name+":1", "-o", "json")
	var img types.Image
	if err := json.Unmarshal([]byte(r.stdout), &img); err != nil || img.Digest == "" {
		t.Fatalf("image inspect on %s: %v %s", nd.name, err, r.stderr)
	}
	return img.Digest
}

// Another node drives a real replica on n2 through n2's agent: start (n2
// first pulls the image from n1's registry, then runs a real container on
// its bridge), a health check made on n2, freeze and
// thaw, stop, the exit through the long-polled Wait, and removal; a
// replica n2 does not have stays not found across the wire.
func TestClusterAgentRemoteReplica(t *testing.T) {
	c := startCluster(t, 2)
	n1, n2 := c.nodes[0], c.nodes[1]
	digest := n1.buildImage("hello")
	cl, done := c.agentClient()
	defer done()
	r := cl.Remote("n2")
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	const id = "hello-e2eagent"
	spec := node.ReplicaSpec{ID: id, App: "hello", Revision: 1, Digest: digest, ImageFrom: "n1",
		Config: mf.Config{Name: "hello", Image: "hello:1", Port: 8080},
		Log:    filepath.Join(n2.dataDir, id+".log")}
	st, err := r.Start(ctx, spec)
	if err != nil {
		t.Fatalf("start on n2: %v", err)
	}
	removed := false
	defer func() {
		if !removed {
			r.Remove(context.Background(), id)
		}
	}()
	if r := n2.shoal("image", "inspect", digest); r.code != 0 {
		t.Fatalf("image fetched from n1 not on n2: %s", r.stderr)
	}
	if st.Node != "n2" || st.Pid == 0 || !strings.HasPrefix(st.Addr, "10.77.0.") {
		t.Fatalf("started: %+v; want a pid and an address on n2's bridge", st)
	}
	health := mf.Health{HTTP: "/", Timeout: mf.Duration{Duration: 2 * time.Second}}
	var checkErr error
	for range 100 {
		if checkErr = r.Check(ctx, id, st.Addr, health); checkErr == nil {
			break
		}
		time.Sleep(100 * time.Millisecond)
	}
	if checkErr != nil {
		t.Fatalf("health check made on n2: %v", checkErr)
	}
	if _, err := r.Freeze(ctx, id); err != nil {
		t.Fatalf("freeze: %v", err)
	}
	if err := r.Thaw(ctx, id); err != nil {
		t.Fatalf("thaw: %v", err)
	}
	exited := make(chan error, 1)
	go func() {
		_, err := r.Wait(ctx, id)
		exited <- err
	}()
	if err := r.Stop(ctx, id, time.Second); err != nil {
		t.Fatalf("stop: %v", err)
	}
	if err := <-exited; err != nil {
		t.Fatalf("wait: %v", err)
	}
	if err := r.Remove(ctx, id); err != nil {
		t.Fatalf("remove: %v", err)
	}
	removed = true
	if err := r.Thaw(ctx, id); !errdefs.IsNotFound(err) {
		t.Fatalf("thaw of a removed replica: %v; want not found", err)
	}
}

// Apps are deployed, listed and removed through a follower: its API sends
// app requests to the leader (the user's access checked on the follower,
// the hop authenticated with the cluster secret), which keeps the app.
func TestClusterAgentForwardsApps(t *testing.T) {
	c := startCluster(t, 2)
	var name string
	c.nodes[0].waitNodes("a leader", func(m map[string]types.Node) bool { name = clustertest.Leader(m); return name != "" })
	leader, follower := c.nodes[0], c.nodes[1]
	if leader.name != name {
		leader, follower = follower, leader
	}
	leader.buildImage("hello")
	f := filepath.Join(t.TempDir(), "shoal.toml")
	os.WriteFile(f, []byte("name = \"hello\"\nimage = \"hello:1\"\nport = 8080\n[scale]\nmin = 0\nmax = 1\n"), 0o644)
	if r := follower.shoal("app", "deploy", "-f", f, "--detach"); r.code != 0 {
		t.Fatalf("deploy through follower %s: %s", follower.name, r.stderr)
	}
	has := func(nd *clusterNode) bool {
		r := nd.shoal("app", "ls", "-o", "json")
		if r.code != 0 {
			t.Fatalf("app ls on %s: %s", nd.name, r.stderr)
		}
		return strings.Contains(r.stdout, `"hello"`)
	}
	if !has(leader) || !has(follower) {
		t.Fatalf("app deployed through the follower: on leader %v, listed by the follower %v; want both", has(leader), has(follower))
	}
	if r := follower.shoal("app", "rm", "hello"); r.code != 0 {
		t.Fatalf("rm through the follower: %s", r.stderr)
	}
	if has(leader) {
		t.Fatal("app still on the leader after rm through the follower")
	}
}
