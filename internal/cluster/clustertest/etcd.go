package clustertest

import (
	"context"
	"encoding/json"
	"fmt"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"time"

	"github.com/shoal-run/shoal/internal/keptproc"
)

// Member is one etcd member of the cluster: peers talk on loopback, clients
// (the daemons) reach it on the bridge's address.
type Member struct {
	Name   string
	Client string // host:port on the bridge
	Peer   string // http://127.0.0.1:port
	Dir    string
	Log    string // its log file

	cmd    *exec.Cmd
	exited <-chan struct{}
}

// startEtcd starts a three-member etcd cluster and waits until it is healthy.
func (c *Cluster) startEtcd(ctx context.Context) error {
	ports, err := freePorts(6)
	if err != nil {
		return err
	}
	var initial []string
	for i := range 3 {
		m := &Member{
			Name:   fmt.Sprintf("e%d", i+1),
			Client: fmt.Sprintf("%s:%d", c.HostIP, ports[2*i]),
			Peer:   fmt.Sprintf("http://127.0.0.1:%d", ports[2*i+1]),
			Dir:    filepath.Join(c.Opts.Dir, fmt.Sprintf("etcd%d", i+1)),
		}
		m.Log = m.Dir + ".log"
		c.Etcd = append(c.Etcd, m)
		initial = append(initial, m.Name+"="+m.Peer)
	}
	for _, m := range c.Etcd {
		if err := m.start(c.Opts.Etcd, strings.Join(initial, ",")); err != nil {
			return err
		}
		c.onClose(func() error {
			m.Kill()
			return os.RemoveAll(m.Dir)
		})
	}
	deadline := time.Now().Add(60 * time.Second)
	for _, m := range c.Etcd {
		for !m.Healthy() {
			if time.Now().After(deadline) {
				return fmt.Errorf("etcd member %s not healthy after 60s: %s", m.Name, Tail(m.Log, 10))
			}
			select {
			case <-ctx.Done():
				return ctx.Err()
			case <-time.After(100 * time.Millisecond):
			}
		}
	}
	return nil
}

func (m *Member) start(bin, initial string) error {
	log, err := os.Create(m.Log)
	if err != nil {
		return fmt.Errorf("etcd member %s: %w", m.Name, err)
	}
	defer log.Close()
	client := "http://" + m.Client
	m.cmd = exec.Command(bin,
		"--name", m.Name, "--data-dir", m.Dir,
		"--listen-client-urls", client, "--advertise-client-urls", client,
		"--listen-peer-urls", m.Peer, "--initial-advertise-peer-urls", m.Peer,
		"--initial-cluster", initial, "--initial-cluster-state", "new",
		"--logger", "zap", "--log-outputs", "stderr")
	m.cmd.Stdout, m.cmd.Stderr = log, log
	m.cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	exited, err := keptproc.Start(m.cmd)
	if err != nil {
		m.cmd = nil
		return fmt.Errorf("start etcd member %s: %w", m.Name, err)
	}
	m.exited = exited
	return nil
}

// Kill stops the member with SIGKILL and waits for it; a member that is not
// running is left alone.
func (m *Member) Kill() {
	if m.cmd == nil {
		return
	}
	m.cmd.Process.Kill()
	<-m.exited
	m.cmd = nil
}

// Healthy reports whether the member answers /health with true.
func (m *Member) Healthy() bool {
	c := http.Client{Timeout: time.Second}
	resp, err := c.Get("http://" + m.Client + "/health")
	if err != nil {
		return false
	}
	defer resp.Body.Close()
	var h struct{ Health string }
	json.NewDecoder(resp.Body).Decode(&h)
	return h.Health == "true"
}

// freePorts finds n ports free on every address of the host, the bridge's
// too.
func freePorts(n int) ([]int, error) {
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
			return nil, fmt.Errorf("a free port: %w", err)
		}
		ls = append(ls, l)
		ports = append(ports, l.Addr().(*net.TCPAddr).Port)
	}
	return ports, nil
}

// Tail returns the last n lines of a file, for error messages.
func Tail(path string, n int) string {
	b, err := os.ReadFile(path)
	if err != nil {
		return err.Error()
	}
	lines := strings.Split(strings.TrimSpace(string(b)), "\n")
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	return strings.Join(lines, "\n")
}
