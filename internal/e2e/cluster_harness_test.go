package e2e

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"math/rand/v2"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/shoal-run/shoal/internal/api/types"
	"github.com/shoal-run/shoal/internal/store/storetest"
)

// testCluster is a real cluster made by a test: three etcd members (Debian's
// etcd, peers on loopback, clients also on the test's bridge), and shoal
// daemons each in a network namespace of its own, joined to the bridge by a
// veth pair. Everything is removed when the test ends, failed or not.
type testCluster struct {
	t      *testing.T
	n      int    // picks the bridge name and the subnet 10.213.<n>.0/24
	bridge string // on the host
	hostIP string // the bridge's address: etcd's clients reach it there
	etcd   []*etcdMember
	nodes  []*clusterNode
}

type etcdMember struct {
	name, client, peer string
	dir                string
	cmd                *exec.Cmd
	exited             chan struct{}
	log                *os.File
}

// clusterNode is one shoal daemon in its own network namespace.
type clusterNode struct {
	c       *testCluster
	name    string
	netns   string
	veth    string // host side
	ip      string
	dataDir string
	runDir  string
	cgroup  string
	cmd     *exec.Cmd
	exited  chan struct{}
	log     *bytes.Buffer
}

func run(t *testing.T, args ...string) {
	t.Helper()
	if out, err := exec.Command(args[0], args[1:]...).CombinedOutput(); err != nil {
		t.Fatalf("%s: %v\n%s", strings.Join(args, " "), err, out)
	}
}

// startCluster makes the bridge, three etcd members and nodes shoal nodes.
func startCluster(t *testing.T, nodes int) *testCluster {
	t.Helper()
	c := &testCluster{t: t, n: rand.IntN(200) + 20}
	for i := 0; i < 200; i++ {
		if _, err := os.Stat(fmt.Sprintf("/sys/class/net/shcl%d", c.n)); err != nil {
			break
		}
		c.n = (c.n-20+1)%200 + 20
	}
	c.bridge = fmt.Sprintf("shcl%d", c.n)
	c.hostIP = fmt.Sprintf("10.213.%d.1", c.n)
	run(t, "ip", "link", "add", c.bridge, "type", "bridge")
	t.Cleanup(func() { exec.Command("ip", "link", "del", c.bridge).Run() })
	run(t, "ip", "addr", "add", c.hostIP+"/24", "dev", c.bridge)
	run(t, "ip", "link", "set", c.bridge, "up")
	c.startEtcd()
	for i := 1; i <= nodes; i++ {
		c.addNode(i)
	}
	return c
}

// startEtcd starts a three-member etcd cluster and waits until it is healthy.
func (c *testCluster) startEtcd() {
	t := c.t
	t.Helper()
	ports := freeLoopbackPorts(t, 6)
	var initial []string
	for i := range 3 {
		m := &etcdMember{
			name:   fmt.Sprintf("e%d", i+1),
			client: fmt.Sprintf("%s:%d", c.hostIP, ports[2*i]),
			peer:   fmt.Sprintf("http://127.0.0.1:%d", ports[2*i+1]),
			dir:    filepath.Join(t.TempDir(), "etcd"),
		}
		c.etcd = append(c.etcd, m)
		initial = append(initial, m.name+"="+m.peer)
	}
	for _, m := range c.etcd {
		m.start(t, strings.Join(initial, ","))
	}
	deadline := time.Now().Add(60 * time.Second)
	for _, m := range c.etcd {
		for !etcdHealthy(m.client) {
			if time.Now().After(deadline) {
				t.Fatalf("etcd member %s not healthy after 60s", m.name)
			}
			time.Sleep(100 * time.Millisecond)
		}
	}
}

func (m *etcdMember) start(t *testing.T, initial string) {
	t.Helper()
	var err error
	if m.log, err = os.Create(m.dir + ".log"); err != nil {
		t.Fatal(err)
	}
	client := "http://" + m.client
	m.cmd = exec.Command(storetest.EtcdBinary,
		"--name", m.name, "--data-dir", m.dir,
		"--listen-client-urls", client, "--advertise-client-urls", client,
		"--listen-peer-urls", m.peer, "--initial-advertise-peer-urls", m.peer,
		"--initial-cluster", initial, "--initial-cluster-state", "new",
		"--logger", "zap", "--log-outputs", "stderr")
	m.cmd.Stdout, m.cmd.Stderr = m.log, m.log
	m.cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	if err := m.cmd.Start(); err != nil {
		t.Fatalf("start etcd: %v", err)
	}
	m.exited = make(chan struct{})
	go func() { m.cmd.Wait(); close(m.exited) }()
	t.Cleanup(func() {
		m.kill()
		m.log.Close()
		if t.Failed() {
			b, _ := os.ReadFile(m.log.Name())
			t.Logf("etcd %s log (tail):\n%s", m.name, tailLines(string(b), 15))
		}
	})
}

// kill stops the member with SIGKILL and waits for it.
func (m *etcdMember) kill() {
	m.cmd.Process.Kill()
	<-m.exited
}

func etcdHealthy(addr string) bool {
	c := http.Client{Timeout: time.Second}
	resp, err := c.Get("http://" + addr + "/health")
	if err != nil {
		return false
	}
	defer resp.Body.Close()
	var h struct{ Health string }
	json.NewDecoder(resp.Body).Decode(&h)
	return h.Health == "true"
}

// freeLoopbackPorts finds n free ports; they are free on every address of
// the host, the bridge's too.
func freeLoopbackPorts(t *testing.T, n int) []int {
	t.Helper()
	var ports []int
	var ls []net.Listener
	defer func() {
		for _, l := range ls {
			l.Close()
		}
	}()
	for range n {
		l, err := net.Listen("tcp", ":0")
		if err != nil {
			t.Fatal(err)
		}
		ls = append(ls, l)
		ports = append(ports, l.Addr().(*net.TCPAddr).Port)
	}
	return ports
}

// storeFlag is the daemons' --store.
func (c *testCluster) storeFlag() string {
	var eps []string
	for _, m := range c.etcd {
		eps = append(eps, m.client)
	}
	return "etcd://" + strings.Join(eps, ",")
}

// addNode makes node i's namespace and veth and starts its daemon.
func (c *testCluster) addNode(i int) *clusterNode {
	t := c.t
	t.Helper()
	base := t.TempDir()
	nd := &clusterNode{c: c, name: fmt.Sprintf("n%d", i),
		netns: fmt.Sprintf("shoal-cl%d-%d", c.n, i), veth: fmt.Sprintf("shc%dh%d", c.n, i),
		ip: fmt.Sprintf("10.213.%d.%d", c.n, 10+i), dataDir: filepath.Join(base, "data"), runDir: filepath.Join(base, "run"),
		cgroup: fmt.Sprintf("/shoal-e2e-cl%d-%d-%d", os.Getpid(), c.n, i)}
	peer := fmt.Sprintf("shc%dn%d", c.n, i)
	run(t, "ip", "netns", "add", nd.netns)
	t.Cleanup(func() { exec.Command("ip", "netns", "del", nd.netns).Run() })
	run(t, "ip", "link", "add", nd.veth, "type", "veth", "peer", "name", peer)
	t.Cleanup(func() { exec.Command("ip", "link", "del", nd.veth).Run() })
	run(t, "ip", "link", "set", nd.veth, "master", c.bridge, "up")
	run(t, "ip", "link", "set", peer, "netns", nd.netns)
	run(t, "ip", "-n", nd.netns, "addr", "add", nd.ip+"/24", "dev", peer)
	run(t, "ip", "-n", nd.netns, "link", "set", peer, "up")
	run(t, "ip", "-n", nd.netns, "link", "set", "lo", "up")
	// Registered after the namespace's cleanup, so it runs before it.
	t.Cleanup(func() {
		nd.kill()
		syscall.Unmount(filepath.Join(nd.runDir, "netns"), syscall.MNT_DETACH)
		roots, _ := filepath.Glob("/sys/fs/cgroup/*")
		for _, r := range append(roots, "/sys/fs/cgroup") {
			os.Remove(filepath.Join(r, nd.cgroup))
		}
		if t.Failed() {
			t.Logf("node %s log (tail):\n%s", nd.name, tailLines(nd.log.String(), 30))
		}
	})
	c.nodes = append(c.nodes, nd)
	nd.start()
	return nd
}

// start starts the node's daemon in its namespace and waits until it answers.
func (nd *clusterNode) start() {
	t := nd.c.t
	t.Helper()
	// nsenter enters only the network namespace: ip netns exec would also
	// mount a /sys of its own, without the cgroup hierarchy under it.
	nd.cmd = exec.Command("nsenter", "--net=/run/netns/"+nd.netns, shoalBin, "daemon",
		"--data-dir", nd.dataDir, "--run-dir", nd.runDir, "--log-level", "debug",
		"--store", nd.c.storeFlag(), "--node-name", nd.name, "--advertise", nd.ip+":7070",
		"--bridge", fmt.Sprintf("shc%db%s", nd.c.n, nd.name[1:]), "--subnet", "10.77.0.0/24", "--cgroup-parent", nd.cgroup,
		"--proxy", "off", "--self-api-port", "-1", "--netns-pool", "-1")
	nd.log = &bytes.Buffer{}
	nd.cmd.Stdout, nd.cmd.Stderr = nd.log, nd.log
	if err := nd.cmd.Start(); err != nil {
		t.Fatalf("start node %s: %v", nd.name, err)
	}
	nd.exited = make(chan struct{})
	go func() { nd.cmd.Wait(); close(nd.exited) }()
	deadline := time.Now().Add(60 * time.Second)
	for nd.shoal("info").code != 0 {
		select {
		case <-nd.exited:
			t.Fatalf("node %s exited before it was ready:\n%s", nd.name, nd.log.String())
		case <-time.After(50 * time.Millisecond):
		}
		if time.Now().After(deadline) {
			t.Fatalf("node %s not ready after 60s:\n%s", nd.name, nd.log.String())
		}
	}
}

// kill stops the node's daemon with SIGKILL (nsenter has exec'd it).
func (nd *clusterNode) kill() {
	if nd.cmd == nil {
		return
	}
	nd.cmd.Process.Kill()
	<-nd.exited
	nd.cmd = nil
}

func (nd *clusterNode) shoal(args ...string) result {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, shoalBin, args...)
	cmd.Env = append(os.Environ(), "SHOAL_HOST=unix://"+filepath.Join(nd.runDir, "shoal.sock"))
	var out, errb bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errb
	err := cmd.Run()
	var ee *exec.ExitError
	switch {
	case errors.As(err, &ee):
		return result{out.String(), errb.String(), ee.ExitCode()}
	case err != nil:
		nd.c.t.Fatalf("shoal %v: %v", args, err)
	}
	return result{out.String(), errb.String(), 0}
}

// nodes lists the cluster's nodes as seen from nd, by name.
func (nd *clusterNode) nodes() (map[string]types.Node, error) {
	r := nd.shoal("node", "ls", "-o", "json")
	if r.code != 0 {
		return nil, fmt.Errorf("node ls on %s: exit %d: %s", nd.name, r.code, r.stderr)
	}
	var list []types.Node
	if err := json.Unmarshal([]byte(r.stdout), &list); err != nil {
		return nil, fmt.Errorf("node ls on %s: %w", nd.name, err)
	}
	out := map[string]types.Node{}
	for _, n := range list {
		out[n.Name] = n
	}
	return out, nil
}

// waitNodes polls nd's node ls until cond holds, and returns how long that took.
func (nd *clusterNode) waitNodes(what string, cond func(map[string]types.Node) bool) time.Duration {
	t := nd.c.t
	t.Helper()
	start := time.Now()
	deadline := start.Add(60 * time.Second)
	var last map[string]types.Node
	var err error
	for {
		if last, err = nd.nodes(); err == nil && cond(last) {
			return time.Since(start)
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s: not after 60s; last node ls from %s: %+v, %v", what, nd.name, last, err)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

func tailLines(s string, n int) string {
	lines := strings.Split(strings.TrimSpace(s), "\n")
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	return strings.Join(lines, "\n")
}
