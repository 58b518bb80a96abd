package e2e

import (
	"bytes"
	"context"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"
)

// galeraStart runs scripts/galera/galera-start outside a container, with
// mariadbd and mariadb-install-db stubbed: it reports, through mariadbd's
// arguments, whether the member starts a new cluster or joins one.
type galeraStart struct {
	t       *testing.T
	datadir string
	args    string // the file the stub mariadbd writes its arguments to
	cmd     *exec.Cmd
	out     bytes.Buffer
	done    chan error
}

// startGaleraStart runs the script with the environment env (the peers,
// the ordinal, Galera's port) and a datadir holding grastate (none when
// empty).
func startGaleraStart(t *testing.T, grastate string, env ...string) *galeraStart {
	t.Helper()
	root, err := filepath.Abs(filepath.Join("..", ".."))
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	g := &galeraStart{t: t, datadir: filepath.Join(dir, "data"), args: filepath.Join(dir, "mariadbd.args"), done: make(chan error, 1)}
	bin := filepath.Join(dir, "bin")
	for name, body := range map[string]string{
		// --wsrep-recover logs the position InnoDB holds, as mariadbd does.
		"mariadbd": "for a; do case $a in --wsrep-recover) rec=1;; --log-error=*) log=\"${a#--log-error=}\";; esac; done\n" +
			"if [ -n \"$rec\" ]; then echo \"[Note] WSREP: Recovered position: " + recovered + "\" >> \"$log\"; exit 0; fi\n" +
			"printf '%s\\n' \"$@\" > " + g.args + ".tmp && mv " + g.args + ".tmp " + g.args,
		"mariadb-install-db": "for a; do case $a in --datadir=*) mkdir -p \"${a#--datadir=}/mysql\";; esac; done",
	} {
		if err := os.MkdirAll(bin, 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(bin, name), []byte("#!/bin/sh\n"+body+"\n"), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.MkdirAll(filepath.Join(g.datadir, "mysql"), 0o755); err != nil {
		t.Fatal(err)
	}
	if grastate != "" {
		if err := os.WriteFile(filepath.Join(g.datadir, "grastate.dat"), []byte(grastate), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	ctx, cancel := context.WithCancel(context.Background())
	g.cmd = exec.CommandContext(ctx, filepath.Join(root, "scripts", "galera", "galera-start")) // #!/bin/bash
	g.cmd.Env = append([]string{"PATH=" + bin + ":" + os.Getenv("PATH"), "GALERA_DATADIR=" + g.datadir,
		"GALERA_NAME=galera-x", "GALERA_BOOTSTRAP_WAIT=2"}, env...)
	g.cmd.Stdout, g.cmd.Stderr = &g.out, &g.out
	if err := g.cmd.Start(); err != nil {
		t.Fatal(err)
	}
	go func() { g.done <- g.cmd.Wait() }()
	t.Cleanup(func() {
		cancel()
		<-g.done
	})
	return g
}

// result waits for the script to exec mariadbd and returns its arguments.
func (g *galeraStart) result() []string {
	g.t.Helper()
	select {
	case err := <-g.done:
		g.done <- err
		if err != nil {
			g.t.Fatalf("galera-start: %v\n%s", err, g.out.String())
		}
	case <-time.After(60 * time.Second):
		g.t.Fatalf("galera-start did not start mariadbd in 60s:\n%s", g.out.String())
	}
	b, err := os.ReadFile(g.args)
	if err != nil {
		g.t.Fatalf("mariadbd was not started: %v\n%s", err, g.out.String())
	}
	return strings.Fields(string(b))
}

// waiting checks that the script still waits, mariadbd not started, well
// past its bootstrap window.
func (g *galeraStart) waiting(d time.Duration) {
	g.t.Helper()
	select {
	case err := <-g.done:
		g.done <- err
		g.t.Fatalf("galera-start ended (%v) instead of waiting for a peer:\n%s", err, g.out.String())
	case <-time.After(d):
	}
	if _, err := os.Stat(g.args); err == nil {
		g.t.Fatalf("mariadbd was started instead of waiting for a peer:\n%s", g.out.String())
	}
}

func newCluster(args []string) bool {
	for _, a := range args {
		if a == "--wsrep-new-cluster" {
			return true
		}
	}
	return false
}

// galeraPort is a loopback port that nothing listens on (a silent peer's),
// and listen makes it answer.
func galeraPort(t *testing.T) (port int, listen func()) {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	port = l.Addr().(*net.TCPAddr).Port
	l.Close()
	return port, func() {
		t.Helper()
		var l net.Listener
		var err error
		for range 50 { // the port was just closed: retry briefly
			if l, err = net.Listen("tcp", net.JoinHostPort("127.0.0.1", strconv.Itoa(port))); err == nil {
				break
			}
			time.Sleep(100 * time.Millisecond)
		}
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { l.Close() })
	}
}

// recovered is the position the stub mariadbd --wsrep-recover reports.
const recovered = "5e0a4f4c-0000-0000-0000-000000000001:57"

const (
	grastateSafe   = "# GALERA saved state\nversion: 2.1\nuuid: 5e0a4f4c-0000-0000-0000-000000000001\nseqno: 42\nsafe_to_bootstrap: 1\n"
	grastateUnsafe = "# GALERA saved state\nversion: 2.1\nuuid: 5e0a4f4c-0000-0000-0000-000000000001\nseqno: -1\nsafe_to_bootstrap: 0\n"
)

// galera-start's choice between starting a new cluster and joining one:
// ordinal 0 starts a new cluster despite its peers only once none answered
// for its whole window and its grastate.dat says safe_to_bootstrap; killed
// (safe_to_bootstrap: 0) or on a fresh volume (a reseed) while its peers
// run, it waits for one of them and joins, never starting a second cluster
// beside theirs; the others always join; a member without peers starts
// the cluster, fresh or safe to bootstrap; after every member went down
// uncleanly (safe_to_bootstrap: 0, no peers) it refuses, naming the
// manual step, unless GALERA_FORCE_BOOTSTRAP=1, and then starts from its
// recovered position.
func TestGaleraStartBootstrap(t *testing.T) {
	// The window is 2 s: 6 s past it the member still waits.
	const past = 8 * time.Second
	for _, c := range []struct{ name, grastate string }{
		{"no peers, fresh volume", ""},
		{"no peers, safe to bootstrap", grastateSafe},
	} {
		t.Run(c.name, func(t *testing.T) {
			g := startGaleraStart(t, c.grastate, "GALERA_ORDINAL=0", "GALERA_PEERS=")
			if args := g.result(); !newCluster(args) {
				t.Fatalf("a member without peers joins: %q", args)
			}
		})
	}
	t.Run("an advertised address", func(t *testing.T) {
		g := startGaleraStart(t, "", "GALERA_ORDINAL=0", "GALERA_PEERS=", "SHOAL_ADVERTISE_HOST=192.0.2.7")
		if args := g.result(); !slices.Contains(args, "--wsrep-node-address=192.0.2.7") {
			t.Fatalf("SHOAL_ADVERTISE_HOST is not its wsrep_node_address: %q", args)
		}
		g = startGaleraStart(t, "", "GALERA_ORDINAL=0", "GALERA_PEERS=")
		if args := g.result(); strings.Contains(strings.Join(args, " "), "--wsrep-node-address") {
			t.Fatalf("without SHOAL_ADVERTISE_HOST: %q", args)
		}
	})
	t.Run("no peers, every member crashed", func(t *testing.T) {
		g := startGaleraStart(t, grastateUnsafe, "GALERA_ORDINAL=0", "GALERA_PEERS=")
		select {
		case err := <-g.done:
			g.done <- err
			if err == nil {
				t.Fatalf("galera-start succeeded:\n%s", g.out.String())
			}
		case <-time.After(60 * time.Second):
			t.Fatalf("galera-start did not end in 60s:\n%s", g.out.String())
		}
		if _, err := os.Stat(g.args); err == nil {
			t.Fatalf("mariadbd was started:\n%s", g.out.String())
		}
		if out := g.out.String(); !strings.Contains(out, "GALERA_FORCE_BOOTSTRAP=1") || !strings.Contains(out, recovered) {
			t.Fatalf("the log names neither the manual step nor the recovered position:\n%s", out)
		}
	})
	t.Run("no peers, every member crashed, forced", func(t *testing.T) {
		g := startGaleraStart(t, grastateUnsafe, "GALERA_ORDINAL=0", "GALERA_PEERS=", "GALERA_FORCE_BOOTSTRAP=1")
		args := g.result()
		if !newCluster(args) || !strings.Contains(strings.Join(args, " "), "--wsrep-start-position="+recovered) {
			t.Fatalf("forced, it does not start a new cluster from its recovered position: %q\n%s", args, g.out.String())
		}
	})
	t.Run("a peer answers", func(t *testing.T) {
		port, listen := galeraPort(t)
		listen()
		g := startGaleraStart(t, grastateSafe, "GALERA_ORDINAL=0", "GALERA_PEERS=127.0.0.1", "GALERA_PORT="+strconv.Itoa(port))
		args := g.result()
		if newCluster(args) {
			t.Fatalf("ordinal 0 starts a new cluster while a peer answers: %q", args)
		}
		if !strings.Contains(strings.Join(args, " "), "--wsrep-cluster-address=gcomm://127.0.0.1") {
			t.Fatalf("mariadbd %q", args)
		}
	})
	t.Run("ordinal 0 safe to bootstrap", func(t *testing.T) {
		port, _ := galeraPort(t)
		g := startGaleraStart(t, grastateSafe, "GALERA_ORDINAL=0", "GALERA_PEERS=127.0.0.1", "GALERA_PORT="+strconv.Itoa(port))
		if args := g.result(); !newCluster(args) {
			t.Fatalf("ordinal 0, safe to bootstrap, no peer answering: it joins: %q\n%s", args, g.out.String())
		}
	})
	for _, c := range []struct {
		name, grastate, ordinal string
	}{
		{"ordinal 0 killed", grastateUnsafe, "0"},
		{"ordinal 0 on a fresh volume", "", "0"},
		{"ordinal 1 safe to bootstrap", grastateSafe, "1"},
	} {
		t.Run(c.name, func(t *testing.T) {
			port, listen := galeraPort(t)
			g := startGaleraStart(t, c.grastate, "GALERA_ORDINAL="+c.ordinal, "GALERA_PEERS=127.0.0.1, 127.0.0.1",
				"GALERA_PORT="+strconv.Itoa(port))
			g.waiting(past)
			listen()
			if args := g.result(); newCluster(args) {
				t.Fatalf("it started a new cluster: %q\n%s", args, g.out.String())
			}
		})
	}
}
