package e2e

import (
	"bufio"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/shoal-run/shoal/internal/api/types"
	"github.com/shoal-run/shoal/internal/cluster/clustertest"
)

// TestClusterRoutes: an app deployed through the cluster's leader, with
// its one replica on a follower, is served by every node's proxy: the
// nodes without a replica reach it through a hop to the replica's node's
// proxy, for a plain request, a server-sent event stream and a WebSocket;
// a request carrying a forged hop header is refused 403 and reaches no
// replica; an app scaled to zero is woken by a request on a follower.
func TestClusterRoutes(t *testing.T) {
	c := startClusterWith(t, 3, true)
	lead := routesLeader(c)
	dir := filepath.Join(examples(t), "hello")
	if r := lead.shoal("image", "build", dir, "--tag", "hello:1", "--entrypoint", "/hello", "--port", "8080"); r.code != 0 {
		t.Fatalf("image build on %s: %s", lead.name, r.stderr)
	}
	var home *clusterNode // a follower: the replica's node
	for _, nd := range c.nodes {
		if nd != lead {
			home = nd
			break
		}
	}
	manifest := fmt.Sprintf("name = \"hello\"\nimage = \"hello:1\"\nport = 8080\n[scale]\nmin = 1\nmax = 1\n"+
		"[health]\nhttp = \"/healthz\"\n[placement]\nnodes = [%q]\n", home.name)
	f := filepath.Join(t.TempDir(), "shoal.toml")
	if err := os.WriteFile(f, []byte(manifest), 0o644); err != nil {
		t.Fatal(err)
	}
	if r := lead.shoal("app", "deploy", "-f", f, "--detach"); r.code != 0 {
		t.Fatalf("deploy through the leader %s: %s", lead.name, r.stderr)
	}
	replica := routesReadyOn(t, lead, home.name)
	cl := &http.Client{Timeout: 10 * time.Second, Transport: &http.Transport{DisableKeepAlives: true}}

	// Every node's proxy answers from the one replica (the route reaches
	// the others through the store: each is given a little time).
	for _, nd := range c.nodes {
		deadline := time.Now().Add(30 * time.Second)
		for {
			code, body, from := proxyGet(cl, nd, "/")
			if code == 200 && strings.HasPrefix(body, "hello from ") {
				if from == "" || !strings.Contains(body, from) {
					t.Fatalf("%s's proxy: answer %q names no replica (X-Replica %q)", nd.name, body, from)
				}
				break
			}
			if time.Now().After(deadline) {
				t.Fatalf("%s's proxy does not serve hello after 30s: %d %q", nd.name, code, body)
			}
			time.Sleep(200 * time.Millisecond)
		}
	}

	// Through a hop: a node without a replica streams events and a
	// WebSocket from the other node's replica.
	var far *clusterNode
	for _, nd := range c.nodes {
		if nd != home {
			far = nd
			break
		}
	}
	req, _ := http.NewRequest("GET", "http://"+far.Proxy()+"/sse", nil)
	req.Host = "hello.localhost"
	resp, err := cl.Do(req)
	if err != nil {
		t.Fatalf("SSE through %s: %v", far.name, err)
	}
	br := bufio.NewReader(resp.Body)
	for i := 1; i <= 3; i++ {
		line, err := br.ReadString('\n')
		if err != nil || !strings.HasPrefix(line, fmt.Sprintf("data: %d from ", i)) {
			t.Fatalf("SSE event %d through %s: %q %v", i, far.name, line, err)
		}
		br.ReadString('\n') // the blank line after each event
	}
	resp.Body.Close()
	wsEcho(t, far)

	// A forged hop header is refused by the replica's node, and by the
	// others.
	hits := replicaRequests(t, cl, home)
	for _, nd := range c.nodes {
		req, _ := http.NewRequest("GET", "http://"+nd.Proxy()+"/", nil)
		req.Host = "hello.localhost"
		req.Header.Set("Shoal-Hop", replica+" 0000000000000000000000000000000000000000000000000000000000000000")
		resp, err := cl.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		b, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if resp.StatusCode != http.StatusForbidden || !strings.Contains(string(b), "Shoal-Hop") {
			t.Fatalf("forged hop header to %s: %d %s; want 403 naming Shoal-Hop", nd.name, resp.StatusCode, b)
		}
	}
	if after := replicaRequests(t, cl, home); after != hits+1 {
		t.Fatalf("the replica counted %d requests, then %d after the forged hops; want only the one asking", hits, after)
	}
	// An app scaled to zero is woken by a request on a follower: its
	// proxy holds it and asks the leader, which starts a replica; the
	// route back through the store releases it.
	cold := "name = \"cold\"\nimage = \"hello:1\"\nport = 8080\n[scale]\nmin = 0\nmax = 1\n[health]\nhttp = \"/healthz\"\n"
	if err := os.WriteFile(f, []byte(cold), 0o644); err != nil {
		t.Fatal(err)
	}
	if r := lead.shoal("app", "deploy", "-f", f, "--detach"); r.code != 0 {
		t.Fatalf("deploy of cold through the leader %s: %s", lead.name, r.stderr)
	}
	var follower *clusterNode
	for _, nd := range c.nodes {
		if nd != lead {
			follower = nd
		}
	}
	deadline := time.Now().Add(30 * time.Second)
	for {
		req, _ := http.NewRequest("GET", "http://"+follower.Proxy()+"/", nil)
		req.Host = "cold.localhost"
		resp, err := (&http.Client{Timeout: 60 * time.Second}).Do(req)
		if err != nil {
			t.Fatalf("cold through %s: %v", follower.name, err)
		}
		b, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if resp.StatusCode == http.StatusOK && strings.HasPrefix(string(b), "hello from cold-") {
			break
		}
		if resp.StatusCode != http.StatusNotFound || time.Now().After(deadline) {
			// 404 only until the app's route reaches the follower.
			t.Fatalf("cold through %s: %d %s; want it woken and served", follower.name, resp.StatusCode, b)
		}
		time.Sleep(200 * time.Millisecond)
	}
	if r := lead.shoal("app", "rm", "cold"); r.code != 0 {
		t.Fatalf("app rm cold: %s", r.stderr)
	}
	if r := lead.shoal("app", "rm", "hello"); r.code != 0 {
		t.Fatalf("app rm: %s", r.stderr)
	}
	for _, nd := range c.nodes {
		deadline := time.Now().Add(30 * time.Second)
		for {
			if code, _, _ := proxyGet(cl, nd, "/"); code == http.StatusNotFound {
				break
			}
			if time.Now().After(deadline) {
				t.Fatalf("%s's proxy still routes hello 30s after it was removed", nd.name)
			}
			time.Sleep(200 * time.Millisecond)
		}
	}
}

// proxyGet sends GET path for hello to nd's proxy: status, body and the
// replica that answered.
func proxyGet(cl *http.Client, nd *clusterNode, path string) (int, string, string) {
	req, _ := http.NewRequest("GET", "http://"+nd.Proxy()+path, nil)
	req.Host = "hello.localhost"
	resp, err := cl.Do(req)
	if err != nil {
		return 0, err.Error(), ""
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b), resp.Header.Get("X-Replica")
}

// replicaRequests is the replica's own count of the requests it served,
// asked through its node's proxy (that request counts too).
func replicaRequests(t *testing.T, cl *http.Client, nd *clusterNode) int {
	t.Helper()
	code, body, _ := proxyGet(cl, nd, "/")
	var n int
	if i := strings.LastIndex(body, "(request "); code != 200 || i < 0 {
		t.Fatalf("hello on %s: %d %q", nd.name, code, body)
	} else if _, err := fmt.Sscanf(body[i:], "(request %d)", &n); err != nil {
		t.Fatalf("hello on %s: %q: %v", nd.name, body, err)
	}
	return n
}

// wsEcho opens a WebSocket to hello through nd's proxy and has one
// message echoed.
func wsEcho(t *testing.T, nd *clusterNode) {
	t.Helper()
	conn, err := net.DialTimeout("tcp", nd.Proxy(), 5*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	conn.SetDeadline(time.Now().Add(10 * time.Second))
	key := "dGhlIHNhbXBsZSBub25jZQ=="
	fmt.Fprintf(conn, "GET /ws HTTP/1.1\r\nHost: hello.localhost\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n"+
		"Sec-WebSocket-Key: %s\r\nSec-WebSocket-Version: 13\r\nOrigin: http://hello.localhost\r\n\r\n", key)
	br := bufio.NewReader(conn)
	resp, err := http.ReadResponse(br, nil)
	if err != nil || resp.StatusCode != http.StatusSwitchingProtocols {
		t.Fatalf("WebSocket through %s: %v %v", nd.name, resp, err)
	}
	// One masked text frame, "ping".
	msg := []byte("ping")
	mask := []byte{1, 2, 3, 4}
	frame := []byte{0x81, 0x80 | byte(len(msg))}
	frame = append(frame, mask...)
	for i, b := range msg {
		frame = append(frame, b^mask[i%4])
	}
	if _, err := conn.Write(frame); err != nil {
		t.Fatal(err)
	}
	head := make([]byte, 2)
	if _, err := io.ReadFull(br, head); err != nil {
		t.Fatalf("WebSocket echo through %s: %v", nd.name, err)
	}
	body := make([]byte, head[1]&0x7f)
	if _, err := io.ReadFull(br, body); err != nil || !strings.HasPrefix(string(body), "ping from ") {
		t.Fatalf("WebSocket echo through %s: %q %v", nd.name, body, err)
	}
}

// routesLeader waits for the cluster's leader and returns its node.
func routesLeader(c *testCluster) *clusterNode {
	c.t.Helper()
	var name string
	c.nodes[0].waitNodes("a leader", func(ns map[string]types.Node) bool { name = clustertest.Leader(ns); return name != "" })
	for _, nd := range c.nodes {
		if nd.name == name {
			return nd
		}
	}
	c.t.Fatalf("leader %q is none of the test's nodes", name)
	return nil
}

// routesReadyOn waits (at most 90 s) until hello has a ready replica on
// node, as the leader lead tells, and returns its ID.
func routesReadyOn(t *testing.T, lead *clusterNode, node string) string {
	t.Helper()
	deadline := time.Now().Add(90 * time.Second)
	var a types.App
	for {
		r := lead.shoal("app", "status", "hello", "--output", "json")
		if r.code == 0 && json.Unmarshal([]byte(r.stdout), &a) == nil {
			for _, rep := range a.Replicas {
				if rep.State == "ready" && rep.Node == node {
					return rep.ID
				}
			}
		}
		if time.Now().After(deadline) {
			t.Fatalf("no ready replica of hello on %s after 90s: %+v %s", node, a.Replicas, r.stderr)
		}
		time.Sleep(200 * time.Millisecond)
	}
}

// TestClusterRolloutThroughHops: under a steady load on every node's
// proxy, an app whose two replicas run on the followers rolls out a new
// revision. The old replicas leave every node's route before they are
// drained and frozen (the leader waits on every node), so no request
// fails, though two of the three proxies reach every replica through a
// hop.
func TestClusterRolloutThroughHops(t *testing.T) {
	c := startClusterWith(t, 3, true)
	lead := routesLeader(c)
	dir := filepath.Join(examples(t), "hello")
	if r := lead.shoal("image", "build", dir, "--tag", "hello:1", "--entrypoint", "/hello", "--port", "8080"); r.code != 0 {
		t.Fatalf("image build on %s: %s", lead.name, r.stderr)
	}
	var followers []string
	for _, nd := range c.nodes {
		if nd != lead {
			followers = append(followers, fmt.Sprintf("%q", nd.name))
		}
	}
	f := filepath.Join(t.TempDir(), "shoal.toml")
	deploy := func(greeting string) {
		t.Helper()
		m := revManifest(2, greeting, "[placement]\nnodes = ["+strings.Join(followers, ", ")+"]")
		if err := os.WriteFile(f, []byte(m), 0o644); err != nil {
			t.Fatal(err)
		}
		if r := lead.shoal("app", "deploy", "-f", f); r.code != 0 {
			t.Fatalf("deploy of %s through the leader: %s", greeting, r.stderr)
		}
	}
	cl := &http.Client{Timeout: 10 * time.Second}
	allSay := func(greeting string) {
		t.Helper()
		for _, nd := range c.nodes {
			deadline := time.Now().Add(30 * time.Second)
			for {
				code, body, _ := proxyGet(cl, nd, "/")
				if code == 200 && strings.HasPrefix(body, greeting+" from ") {
					break
				}
				if time.Now().After(deadline) {
					t.Fatalf("%s's proxy does not answer %s after 30s: %d %q", nd.name, greeting, code, body)
				}
				time.Sleep(100 * time.Millisecond)
			}
		}
	}
	deploy("v1")
	allSay("v1")

	// Two clients on each proxy, until the rollout is over (60 s at most).
	stop := make(chan struct{})
	var mu sync.Mutex
	var sent, failed int
	var failures []string
	var wg sync.WaitGroup
	for _, nd := range c.nodes {
		for range 2 {
			wg.Add(1)
			go func() {
				defer wg.Done()
				end := time.Now().Add(60 * time.Second)
				for time.Now().Before(end) {
					select {
					case <-stop:
						return
					default:
					}
					code, body, _ := proxyGet(cl, nd, "/")
					mu.Lock()
					sent++
					if code != 200 {
						failed++
						if len(failures) < 5 {
							failures = append(failures, fmt.Sprintf("%s: %d %q", nd.name, code, body))
						}
					}
					mu.Unlock()
				}
			}()
		}
	}
	deploy("v2")
	allSay("v2")
	close(stop)
	wg.Wait()
	if sent < 10 || failed > 0 {
		t.Fatalf("%d of %d requests failed during the rollout: %v", failed, sent, failures)
	}
	t.Logf("%d requests through three proxies during the rollout, none failed", sent)
	if r := lead.shoal("app", "rm", "hello"); r.code != 0 {
		t.Fatalf("app rm: %s", r.stderr)
	}
}
