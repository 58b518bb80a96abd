package daemon

import (
	"context"
	"encoding/json"
	"io"
	"log/slog"
	"net/http/httptest"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/shoal-run/shoal/internal/agent"
	"github.com/shoal-run/shoal/internal/cluster"
	"github.com/shoal-run/shoal/internal/proxy"
	"github.com/shoal-run/shoal/internal/route"
	"github.com/shoal-run/shoal/internal/store"
)

// leaderRouting is the leader's side of the routing calls.
type leaderRouting struct {
	mu      sync.Mutex
	woken   []string
	reports map[string]map[string]route.Load
}

func (l *leaderRouting) Activate(app string) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.woken = append(l.woken, app)
}

func (l *leaderRouting) Report(node string, loads map[string]route.Load) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.reports[node] = loads
}

func (l *leaderRouting) WaitApplied(ctx context.Context, id string, seq int64) error { return nil }

// A follower's wake-ups and load reports reach the leader the election
// names, through its agent with the cluster secret; the follower's proxy
// gets the store's routes before serving starts.
func TestFollowerRoutingReachesTheLeader(t *testing.T) {
	quiet := slog.New(slog.NewTextHandler(io.Discard, nil))
	st, err := store.OpenBolt(filepath.Join(t.TempDir(), "store.db"))
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	ctx := context.Background()
	const secret = "cluster-secret-0123456789"
	lr := &leaderRouting{reports: map[string]map[string]route.Load{}}
	srv := httptest.NewServer((&agent.Server{Name: "n1", Secret: secret, Log: quiet, Routing: lr}).Handler())
	defer srv.Close()
	put := func(key string, v any) {
		b, _ := json.Marshal(v)
		if _, err := st.Put(ctx, key, b); err != nil {
			t.Fatal(err)
		}
	}
	put(store.NodeKey("n1"), cluster.Record{Name: "n1", Addr: strings.TrimPrefix(srv.URL, "http://"), ProxyAddr: "192.0.2.1:8080"})
	put(store.NodeKey("n2"), cluster.Record{Name: "n2", ProxyAddr: "192.0.2.2:8080"})
	if _, err := st.Put(ctx, store.LeaderPrefix+"0001", []byte("n1")); err != nil {
		t.Fatal(err)
	}
	put(store.RouteKey("web"), map[string]any{"leader": "n1", "route": route.Route{App: "web",
		Endpoints: []route.Endpoint{{ID: "web-1", Addr: "10.77.0.5:8080", Node: "n1"}}}})

	d := &Daemon{cfg: Config{Node: "n2"}, store: st, log: quiet}
	d.lead = d.newLeadership()
	defer d.lead.close()
	table := proxy.New(proxy.Options{Logger: quiet})
	cr := d.newClusterRouting(table, table.Loads, nil)
	defer cr.close()
	if l := table.Load("web"); l.Endpoints == nil {
		t.Fatal("the store's route is not in the proxy once the routing is made")
	}
	cr.peers.Store(agent.NewClient(st, secret))
	apps := clusterApps{act: cr.act}
	apps.Activate("web")
	if err := cr.ReportLoad(ctx, "n2", map[string]route.Load{"web": {InFlight: 2}}); err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(5 * time.Second)
	for {
		lr.mu.Lock()
		done := len(lr.woken) == 1 && lr.reports["n2"]["web"].InFlight == 2
		lr.mu.Unlock()
		if done {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the leader got wake-ups %v and reports %v", lr.woken, lr.reports)
		}
		time.Sleep(5 * time.Millisecond)
	}
}
