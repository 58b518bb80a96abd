package daemon

import (
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"testing"

	"github.com/shoal-run/shoal/internal/agent"
	"github.com/shoal-run/shoal/internal/api"
	"github.com/shoal-run/shoal/internal/errdefs"
)

// A single-host daemon's TCP API has no agent routes: a request carrying
// any secret is the user API's, which asks for its own token. A node of a
// cluster serves them behind the cluster secret, and the user API beside
// them behind the API token, each refusing the other's.
func TestTCPHandlerMountsAgentOnlyInCluster(t *testing.T) {
	quiet := slog.New(slog.NewTextHandler(io.Discard, nil))
	apiSrv := &api.Server{Logger: quiet}
	get := func(h http.Handler, path, token string) int {
		srv := httptest.NewServer(h)
		defer srv.Close()
		req, _ := http.NewRequest(http.MethodGet, srv.URL+path, nil)
		req.Header.Set("Authorization", "Bearer "+token)
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		return resp.StatusCode
	}
	const apiTok, secret = "api-token-0123456789", "cluster-secret-0123456789"
	single := (&Daemon{}).tcpHandler(apiSrv.Handler(apiTok))
	if code := get(single, agent.Prefix+"ping", secret); code != http.StatusUnauthorized {
		t.Fatalf("single host, ping with a secret: %d; want the API's 401", code)
	}
	if code := get(single, agent.Prefix+"ping", apiTok); code != http.StatusNotFound {
		t.Fatalf("single host, ping with the API token: %d; want 404 (no agent)", code)
	}
	if code := get(single, "/v2/", apiTok); code != http.StatusNotFound {
		t.Fatalf("single host, /v2/ with the API token: %d; want 404 (no registry)", code)
	}
	d := &Daemon{cluster: &clusterNode{agent: &agent.Server{Name: "n1", Secret: secret, Log: quiet}}}
	node := d.tcpHandler(apiSrv.Handler(apiTok))
	for _, c := range []struct {
		path, token string
		code        int
	}{
		{agent.Prefix + "ping", secret, http.StatusOK},
		{agent.Prefix + "ping", apiTok, http.StatusUnauthorized},
		{agent.Prefix + "ping", "", http.StatusUnauthorized},
		{"/v1/containers", secret, http.StatusUnauthorized},
		{"/v2/", secret, http.StatusServiceUnavailable}, // no image store in this test
		{"/v2/", apiTok, http.StatusUnauthorized},
	} {
		if code := get(node, c.path, c.token); code != c.code {
			t.Errorf("cluster node, %s with %q: %d; want %d", c.path, c.token, code, c.code)
		}
	}
}

// --cluster-token-file is refused on a single host, naming the flag.
func TestValidateClusterTokenFile(t *testing.T) {
	quiet := slog.New(slog.NewTextHandler(io.Discard, nil))
	cfg := Config{DataDir: "/tmp/d", RunDir: "/tmp/r", Node: "n1", ClusterTokenFile: "/etc/shoal/cluster-token", Logger: quiet}
	if err := cfg.Validate(); !errdefs.IsInvalid(err) || errdefs.Field(err) != "--cluster-token-file" {
		t.Fatalf("bolt with a cluster token file: %v", err)
	}
	cfg.Store = "etcd://127.0.0.1:2379"
	if err := cfg.Validate(); err != nil {
		t.Fatalf("etcd with a cluster token file: %v", err)
	}
}
