// Package stateful is the stateful benchmark suite: the Galera example (a
// [stateful] app of three MariaDB members, Debian's mariadb-server and
// galera-4) under sysbench's oltp_read_write through the proxy's TCP
// route, one member's mariadbd killed: the failed transactions and the
// time until the cluster has 3 synced members again, beside the published
// 1.8 % and 32 s.
package stateful

import (
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"github.com/shoal-run/shoal/internal/api/types"
	"github.com/shoal-run/shoal/internal/bench"
	"github.com/shoal-run/shoal/internal/bench/kit"
)

const title = "Stateful: a Galera cluster loses a member under sysbench"

func init() {
	bench.Register(bench.Suite{Name: "stateful", Title: title, Run: Stateful})
}

// The suite's daemon network and cgroup parent, apart from the other
// suites'.
var statefulNet = kit.DaemonNet{Bridge: "shoalbg0", Subnet: "10.193.0.0/16", CgroupParent: "/shoal-bench-stateful"}

// Row names.
const (
	rowRecover = "a member's mariadbd killed (SIGKILL) under sysbench"
	rowSB      = "sysbench oltp_read_write, 4 threads, through the proxy"
	rowWriter  = "single-row INSERTs, 1 client, through the proxy"
)

// The published figures (the containerized-DevOps paper's MySQL Galera
// cluster): failed requests and time to recover a MySQL instance.
const (
	pubFailedPct   = 1.8
	pubRecoverS    = 32.0
	pubRecoverVMsS = 74.0
)

// password is the application account's in the suite's cluster.
const password = "bench-galera"

// env is the suite's daemon and its Galera app.
type env struct {
	*kit.ServingEnv
	route string // host:port of the app's TCP route on the proxy
	quick bool
}

// runSide is what one failover saw besides its time.
type runSide struct {
	sbTxns, sbFailed int // sysbench's transactions and ignored errors; -1: no summary
	sbCrashed        int // sysbench runs that ended without a summary
	wAttempts        int // the writer's INSERTs
	wFailed          int
	victim           string
	rows             int // rows the writer saw committed, all found on every member
}

// Stateful runs the suite.
func Stateful(ctx context.Context, o bench.Options) (_ *bench.Report, retErr error) {
	if o.ShoalBin == "" {
		return nil, fmt.Errorf("stateful: the shoal binary under test is required")
	}
	for _, tool := range []string{"mariadb", "sysbench"} {
		if _, err := exec.LookPath(tool); err != nil {
			return nil, fmt.Errorf("stateful: %s (scripts/install-deps.sh test installs it): %w", tool, err)
		}
	}
	rep := bench.NewReport(ctx, "stateful", title, o)
	dir, err := o.ScratchDir("stateful")
	if err != nil {
		return nil, err
	}
	defer os.RemoveAll(dir)
	se, err := kit.NewServingEnv(ctx, o, dir, statefulNet)
	if err != nil {
		return nil, fmt.Errorf("stateful: %w", err)
	}
	e := &env{ServingEnv: se, quick: o.Quick}
	defer func() {
		if err := e.Close(context.WithoutCancel(ctx)); err != nil && retErr == nil {
			retErr = fmt.Errorf("stateful: %w", err)
		}
	}()
	deployed, err := e.deploy(ctx)
	if err != nil {
		return rep, fmt.Errorf("stateful: %w", err)
	}
	sb := e.sysbenchArgs()
	if out, err := exec.CommandContext(ctx, "sysbench", append(sb, "oltp_read_write", "prepare")...).CombinedOutput(); err != nil {
		return rep, fmt.Errorf("stateful: sysbench prepare: %w\n%s", err, out)
	}
	if _, err := e.sql(e.route, "CREATE TABLE committed (id INT PRIMARY KEY, run INT)"); err != nil {
		return rep, fmt.Errorf("stateful: %w", err)
	}

	runs := o.RunsOr(3, 1)
	var sides []runSide
	rows, err := bench.Measure(ctx, o, 0, runs, []bench.Subject{{
		Name:    rowRecover,
		Command: "kill -KILL <pid of galera-N's mariadbd>; until the 3 members are ready and each is Synced in a cluster of 3",
		Run: func(ctx context.Context, i int) (float64, error) {
			d, side, err := e.failover(ctx, i)
			if err != nil {
				return 0, err
			}
			sides = append(sides, side)
			return d.Seconds(), nil
		},
	}})
	if err != nil {
		return rep, fmt.Errorf("stateful: %w", err)
	}
	e.render(rep, rows, sides, deployed)
	return rep, nil
}

// deploy imports the galera image, deploys examples/galera/shoal.toml (its
// image and port the suite's, its password in the environment) and waits
// for 3 synced members; it returns how long that took from the deploy.
func (e *env) deploy(ctx context.Context) (time.Duration, error) {
	tag, err := e.DebianImage(ctx, "galera")
	if err != nil {
		return 0, err
	}
	root, err := bench.SourceTree()
	if err != nil {
		return 0, err
	}
	raw, err := os.ReadFile(filepath.Join(root, "examples", "galera", "shoal.toml"))
	if err != nil {
		return 0, err
	}
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return 0, err
	}
	port := l.Addr().(*net.TCPAddr).Port
	l.Close()
	e.route = net.JoinHostPort("127.0.0.1", strconv.Itoa(port))
	text, err := galeraManifest(string(raw), tag, port)
	if err != nil {
		return 0, err
	}
	path := filepath.Join(e.Dir, "galera.toml")
	if err := os.WriteFile(path, []byte(text), 0o644); err != nil {
		return 0, err
	}
	e.Mu.Lock()
	e.Apps["galera"] = true
	e.Mu.Unlock()
	t0 := time.Now()
	if _, err := e.Daemon.CLI(ctx, "app", "deploy", "-f", path, "--detach"); err != nil {
		return 0, err
	}
	if err := e.waitSynced(ctx, 15*time.Minute); err != nil {
		return 0, err
	}
	d := time.Since(t0)
	e.Opts.Logf("galera: 3 synced members %v after the deploy", d.Round(time.Second))
	return d, nil
}

// galeraManifest is examples/galera/shoal.toml (raw) as the suite deploys
// it: its image tag, its TCP route on port, the password in the
// environment rather than a secret (the suite's cluster lives only as
// long as the run), its [secrets] table gone.
func galeraManifest(raw, tag string, port int) (string, error) {
	text := raw
	for _, r := range [][2]string{
		{`image = "galera:1"`, fmt.Sprintf("image = %q", tag)},
		{"listen = 13306", "listen = " + strconv.Itoa(port)},
		{`MARIADB_PASSWORD_FILE = "/run/secrets/db_password"`, fmt.Sprintf("MARIADB_PASSWORD = %q", password)},
	} {
		if !strings.Contains(text, r[0]) {
			return "", fmt.Errorf("examples/galera/shoal.toml has no %q", r[0])
		}
		text = strings.Replace(text, r[0], r[1], 1)
	}
	// Its [secrets] table (the last) goes with the secret.
	sec := strings.Index(text, "\n[secrets]\n")
	if sec < 0 {
		return "", fmt.Errorf("examples/galera/shoal.toml has no [secrets] table")
	}
	rest := text[sec+len("\n[secrets]\n"):]
	if nl := strings.IndexByte(rest, '\n'); nl >= 0 && strings.TrimSpace(rest[nl:]) != "" {
		return "", fmt.Errorf("examples/galera/shoal.toml: [secrets] is not its last table with one line")
	}
	return text[:sec+1], nil
}

// sql runs statements with Debian's mariadb client as the application
// account on addr and returns the rows, tab separated.
func (e *env) sql(addr, query string) (string, error) {
	host, port, err := net.SplitHostPort(addr)
	if err != nil {
		return "", err
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	cmd := exec.CommandContext(ctx, "mariadb", "-h", host, "-P", port, "-u", "app", "--connect-timeout=5", "-N", "-B", "app", "-e", query)
	cmd.Env = append(os.Environ(), "MYSQL_PWD="+password)
	out, err := cmd.Output()
	if err != nil {
		var ee *exec.ExitError
		if errors.As(err, &ee) {
			return "", fmt.Errorf("mariadb %s %q: %w: %s", addr, query, err, strings.TrimSpace(string(ee.Stderr)))
		}
		return "", fmt.Errorf("mariadb %s %q: %w", addr, query, err)
	}
	return strings.TrimSpace(string(out)), nil
}

// memberAddr is a replica's MariaDB address (its own address, port 3306).
func memberAddr(r types.Replica) string {
	host, _, _ := net.SplitHostPort(r.Addr)
	return net.JoinHostPort(host, "3306")
}

// synced reports whether the app's 3 ordinals are ready and each member is
// Synced in a cluster of 3.
func (e *env) synced(a types.App) bool {
	if kit.CountState(a, "ready") != 3 || len(a.Replicas) != 3 {
		return false
	}
	for _, r := range a.Replicas {
		out, err := e.sql(memberAddr(r), "SELECT VARIABLE_VALUE FROM information_schema.GLOBAL_STATUS WHERE VARIABLE_NAME IN "+
			"('WSREP_CLUSTER_SIZE', 'WSREP_LOCAL_STATE_COMMENT') ORDER BY VARIABLE_NAME")
		if f := strings.Fields(out); err != nil || len(f) != 2 || f[0] != "3" || f[1] != "Synced" {
			return false
		}
	}
	return true
}

// waitSynced waits until the cluster has 3 synced members.
func (e *env) waitSynced(ctx context.Context, limit time.Duration) error {
	deadline := time.Now().Add(limit)
	for {
		a, err := e.Status(ctx, "galera")
		if err == nil && e.synced(a) {
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("galera: not 3 synced members after %s (state %s, %d ready)", limit, a.State, a.Ready)
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(250 * time.Millisecond):
		}
	}
}

// sysbenchArgs are sysbench's connection and table options, through the
// proxy's TCP route.
func (e *env) sysbenchArgs() []string {
	host, port, _ := net.SplitHostPort(e.route)
	return []string{"--db-driver=mysql", "--mysql-host=" + host, "--mysql-port=" + port,
		"--mysql-user=app", "--mysql-password=" + password, "--mysql-db=app",
		"--tables=1", "--table-size=1000", "--rand-type=uniform"}
}
