package e2e

import (
	"context"
	"encoding/json"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/shoal-run/shoal/internal/store"
)

// clusterSecret reads the secret the nodes made in the store.
func (c *testCluster) clusterSecret() string {
	t := c.t
	t.Helper()
	var eps []string
	for _, m := range c.etcd {
		eps = append(eps, "http://"+m.client)
	}
	st, err := store.OpenEtcd(context.Background(), eps)
	if err != nil {
		t.Fatal(err)
	}
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
