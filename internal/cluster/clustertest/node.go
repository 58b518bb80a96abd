package clustertest

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"time"

	"github.com/shoal-run/shoal/internal/api/types"
)

// Node is one shoal daemon of the cluster, in its own network namespace.
type Node struct {
	c       *Cluster
	Name    string // n<i>
	NetNS   string // under /run/netns
	Veth    string // the host side of its link
	IP      string // on the bridge
	DataDir string
	RunDir  string
	Cgroup  string // its --cgroup-parent
	Log     string // its daemon's log file (appended to by every start)
	HTTP    *http.Client

	cmd    *exec.Cmd
	exited chan struct{}
}

// Advertise is the node's --advertise address.
func (nd *Node) Advertise() string { return fmt.Sprintf("%s:%d", nd.IP, APIPort) }

// Proxy is where the node's proxy takes requests (with Options.Proxy).
func (nd *Node) Proxy() string { return fmt.Sprintf("%s:%d", nd.IP, ProxyPort) }

// Sock is the node's API socket on the host.
func (nd *Node) Sock() string { return filepath.Join(nd.RunDir, "shoal.sock") }

// AddNode makes the next node's namespace and link and starts its daemon.
func (c *Cluster) AddNode(ctx context.Context) (*Node, error) {
	i := len(c.Nodes) + 1
	base := filepath.Join(c.Opts.Dir, fmt.Sprintf("n%d", i))
	nd := &Node{c: c, Name: fmt.Sprintf("n%d", i),
		NetNS: fmt.Sprintf("shoal-%s%d-%d", c.Opts.Tag, c.N, i), Veth: fmt.Sprintf("sh%s%dh%d", c.Opts.Tag, c.N, i),
		IP: fmt.Sprintf("%s.%d.%d", c.Opts.Net, c.N, 10+i), DataDir: filepath.Join(base, "data"), RunDir: filepath.Join(base, "run"),
		Cgroup: fmt.Sprintf("%s-%d-%d", c.Opts.CgroupPrefix, c.N, i), Log: base + ".log"}
	nd.HTTP = &http.Client{Timeout: 10 * time.Second, Transport: &http.Transport{
		DialContext: func(ctx context.Context, _, _ string) (net.Conn, error) {
			return (&net.Dialer{}).DialContext(ctx, "unix", nd.Sock())
		},
	}}
	peer := fmt.Sprintf("sh%s%dn%d", c.Opts.Tag, c.N, i)
	if err := ip("netns", "add", nd.NetNS); err != nil {
		return nil, err
	}
	c.onClose(func() error { return ip("netns", "del", nd.NetNS) })
	if err := ip("link", "add", nd.Veth, "type", "veth", "peer", "name", peer); err != nil {
		return nil, err
	}
	c.onClose(func() error {
		if !linkExists(nd.Veth) {
			return nil // gone with the namespace's end of the pair
		}
		return ip("link", "del", nd.Veth)
	})
	for _, args := range [][]string{
		{"link", "set", nd.Veth, "master", c.Bridge, "up"},
		{"link", "set", peer, "netns", nd.NetNS},
		{"-n", nd.NetNS, "addr", "add", nd.IP + "/24", "dev", peer},
		{"-n", nd.NetNS, "link", "set", peer, "up"},
		{"-n", nd.NetNS, "link", "set", "lo", "up"},
	} {
		if err := ip(args...); err != nil {
			return nil, err
		}
	}
	// Registered after the namespace's removal, so it runs before it.
	c.onClose(func() error { return nd.scrub(base) })
	c.Nodes = append(c.Nodes, nd)
	return nd, nd.Start(ctx)
}

// Start starts the node's daemon in its namespace (on the folders of any
// earlier start) and waits until its API answers.
func (nd *Node) Start(ctx context.Context) error {
	if nd.cmd != nil {
		return fmt.Errorf("node %s: its daemon runs already", nd.Name)
	}
	o := nd.c.Opts
	proxy := "off"
	if o.Proxy {
		proxy = nd.Proxy()
	}
	// nsenter enters only the network namespace: ip netns exec would also
	// mount a /sys of its own, without the cgroup hierarchy under it.
	args := append([]string{"--net=/run/netns/" + nd.NetNS, o.Shoal, "daemon",
		"--data-dir", nd.DataDir, "--run-dir", nd.RunDir, "--log-level", "debug",
		"--store", nd.c.StoreFlag(), "--node-name", nd.Name, "--advertise", nd.Advertise(),
		"--bridge", fmt.Sprintf("sh%s%db%s", o.Tag, nd.c.N, nd.Name[1:]), "--subnet", "10.77.0.0/24", "--cgroup-parent", nd.Cgroup,
		"--proxy", proxy, "--self-api-port", "-1", "--netns-pool", "-1"}, o.Args...)
	log, err := os.OpenFile(nd.Log, os.O_WRONLY|os.O_CREATE|os.O_APPEND, 0o644)
	if err != nil {
		return fmt.Errorf("node %s: %w", nd.Name, err)
	}
	defer log.Close()
	nd.cmd = exec.Command("nsenter", args...)
	nd.cmd.Stdout, nd.cmd.Stderr = log, log
	if err := nd.cmd.Start(); err != nil {
		nd.cmd = nil
		return fmt.Errorf("start node %s: %w", nd.Name, err)
	}
	exited := make(chan struct{})
	nd.exited = exited
	go func(cmd *exec.Cmd) { cmd.Wait(); close(exited) }(nd.cmd)
	deadline := time.Now().Add(60 * time.Second)
	for !nd.healthy(ctx) {
		select {
		case <-exited:
			nd.cmd = nil
			return fmt.Errorf("node %s exited before it was ready: %s", nd.Name, Tail(nd.Log, 20))
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(50 * time.Millisecond):
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("node %s not ready after 60s: %s", nd.Name, Tail(nd.Log, 20))
		}
	}
	return nil
}

func (nd *Node) healthy(ctx context.Context) bool {
	resp, err := nd.get(ctx, "/v1/health")
	if err != nil {
		return false
	}
	resp.Body.Close()
	return resp.StatusCode == http.StatusOK
}

// Running reports whether the node's daemon runs.
func (nd *Node) Running() bool { return nd.cmd != nil }

// Kill stops the node's daemon with SIGKILL (nsenter has exec'd it) and
// waits for it. What the daemon started (its proxy, replicas) runs on.
func (nd *Node) Kill() {
	if nd.cmd == nil {
		return
	}
	nd.cmd.Process.Kill()
	<-nd.exited
	nd.cmd = nil
}

// Stop stops the node's daemon with SIGTERM and waits for it (at most 30s,
// then SIGKILL).
func (nd *Node) Stop() {
	if nd.cmd == nil {
		return
	}
	nd.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-nd.exited:
	case <-time.After(30 * time.Second):
		nd.cmd.Process.Kill()
		<-nd.exited
	}
	nd.cmd = nil
}

// Result is what a CLI command printed and its exit code.
type Result struct {
	Stdout, Stderr string
	Code           int
}

// Shoal runs the shoal CLI against the node's API socket.
func (nd *Node) Shoal(ctx context.Context, args ...string) (Result, error) {
	ctx, cancel := context.WithTimeout(ctx, time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, nd.c.Opts.Shoal, args...)
	cmd.Env = append(os.Environ(), "SHOAL_HOST=unix://"+nd.Sock())
	var out, errb bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errb
	err := cmd.Run()
	var ee *exec.ExitError
	switch {
	case errors.As(err, &ee):
		return Result{out.String(), errb.String(), ee.ExitCode()}, nil
	case err != nil:
		return Result{}, fmt.Errorf("shoal %s on %s: %w", strings.Join(args, " "), nd.Name, err)
	}
	return Result{out.String(), errb.String(), 0}, nil
}

func (nd *Node) get(ctx context.Context, path string) (*http.Response, error) {
	req, err := http.NewRequestWithContext(ctx, "GET", "http://shoal"+path, nil)
	if err != nil {
		return nil, err
	}
	return nd.HTTP.Do(req)
}

// GetJSON decodes the answer of a GET on the node's API.
func (nd *Node) GetJSON(ctx context.Context, path string, v any) error {
	resp, err := nd.get(ctx, path)
	if err != nil {
		return fmt.Errorf("GET %s on %s: %w", path, nd.Name, err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		b, _ := io.ReadAll(io.LimitReader(resp.Body, 4096))
		return fmt.Errorf("GET %s on %s: %s: %s", path, nd.Name, resp.Status, strings.TrimSpace(string(b)))
	}
	return json.NewDecoder(resp.Body).Decode(v)
}

// Nodes lists the cluster's nodes as nd's API shows them, by name.
func (nd *Node) Nodes(ctx context.Context) (map[string]types.Node, error) {
	var list []types.Node
	if err := nd.GetJSON(ctx, "/v1/nodes", &list); err != nil {
		return nil, err
	}
	out := map[string]types.Node{}
	for _, n := range list {
		out[n.Name] = n
	}
	return out, nil
}

// Leader returns the name of the one node listed as leader, or "".
func Leader(nodes map[string]types.Node) string {
	var leaders []string
	for _, n := range nodes {
		if n.Leader {
			leaders = append(leaders, n.Name)
		}
	}
	if len(leaders) != 1 {
		return ""
	}
	return leaders[0]
}
