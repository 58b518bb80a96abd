package e2e

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"math/rand/v2"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"syscall"
	"testing"

	"github.com/shoal-run/shoal/internal/image/imagetest"
	"github.com/shoal-run/shoal/internal/sandbox/stub/stubtest"
	"time"
)

var shoalBin string

func TestMain(m *testing.M) {
	if os.Geteuid() != 0 {
		fmt.Fprintln(os.Stderr, "e2e tests need root: they run real containers")
		os.Exit(1)
	}
	shoalBin = os.Getenv("SHOAL_BIN")
	var tmp string
	if shoalBin == "" {
		var err error
		tmp, err = os.MkdirTemp("", "shoal-e2e-bin")
		if err != nil {
			panic(err)
		}
		shoalBin = filepath.Join(tmp, "shoal")
		cmd := exec.Command("go", "build", "-o", shoalBin, "github.com/shoal-run/shoal/cmd/shoal")
		cmd.Stdout, cmd.Stderr = os.Stdout, os.Stderr
		if err := cmd.Run(); err != nil {
			fmt.Fprintln(os.Stderr, "build shoal:", err)
			os.Exit(1)
		}
		// Beside shoal, as make build puts it: the daemon's reusable job
		// sandboxes run it.
		if err := stubtest.Build(filepath.Join(tmp, "shoal-init")); err != nil {
			fmt.Fprintln(os.Stderr, err)
			os.Exit(1)
		}
	}
	code := m.Run()
	if tmp != "" {
		os.RemoveAll(tmp)
	}
	os.Exit(code)
}

// daemon is a shoal daemon started by a test.
type daemon struct {
	t       *testing.T
	dataDir string
	runDir  string
	sock    string
	cmd     *exec.Cmd
	log     *bytes.Buffer
	earlier []*bytes.Buffer // the logs of the daemons started before this one
	extra   []string
	bridge  string
	subnet  string
	cgroup  string
}

// startDaemon starts a daemon on fresh directories and waits until it answers.
func startDaemon(t *testing.T, extra ...string) *daemon {
	t.Helper()
	base := t.TempDir()
	d := &daemon{t: t, dataDir: filepath.Join(base, "data"), runDir: filepath.Join(base, "run"), extra: extra}
	d.sock = filepath.Join(d.runDir, "shoal.sock")
	// Each daemon gets its own bridge and subnet so that tests running at the
	// same time never share address reservations. One that something
	// else left on the host is not taken: what is left at the end is this
	// daemon's doing.
	nat, err := exec.Command("iptables-save", "-t", "nat").Output()
	if err != nil {
		t.Fatalf("iptables-save: %v", err)
	}
	n := rand.IntN(200) + 20
	for i := 0; i < 200 && netInUse(string(nat), fmt.Sprintf("shoale%d", n)); i++ {
		n = (n-20+1)%200 + 20
	}
	// e2e daemons take 10.181.0.0/16 (a second daemon of a test,
	// 10.187.0.0/16): the bench packages' tests, run beside e2e by
	// go test ./..., hold 10.182-10.186 and 10.188-10.191.
	d.bridge, d.subnet = fmt.Sprintf("shoale%d", n), fmt.Sprintf("10.181.%d.0/24", n)
	d.cgroup = fmt.Sprintf("/shoal-e2e-%d-%d", os.Getpid(), n)
	// Registered first, so it runs last, even after a cleanup that failed.
	t.Cleanup(d.noProxyLeft)
	d.start()
	t.Cleanup(func() {
		d.stop(syscall.SIGTERM)
		// Leave nothing behind: remove every container the test left.
		d.removeAll()
		d.unmountLayers()
		// The namespace directory is a bind mount that outlives a daemon
		// killed with SIGKILL (containers may still use it).
		syscall.Unmount(filepath.Join(d.runDir, "netns"), syscall.MNT_DETACH)
		roots, _ := filepath.Glob("/sys/fs/cgroup/*")
		for _, r := range append(roots, "/sys/fs/cgroup") {
			os.Remove(filepath.Join(r, d.cgroup))
		}
		d.cleanHost()
		if t.Failed() {
			// Every start's log: the one that failed is seldom the last
			// (the clean-up above starts a daemon too).
			for i, l := range d.earlier {
				t.Logf("daemon log, start %d:\n%s", i+1, l.String())
			}
			t.Logf("daemon log, start %d (clean-up):\n%s", len(d.earlier)+1, d.log.String())
			if b, err := os.ReadFile(filepath.Join(d.runDir, "proxy.log")); err == nil {
				t.Logf("proxy log:\n%s", b)
			}
		}
	})
	return d
}

func (d *daemon) start() {
	t := d.t
	t.Helper()
	args := append([]string{"daemon", "--data-dir", d.dataDir, "--run-dir", d.runDir, "--log-level", "debug",
		"--bridge", d.bridge, "--subnet", d.subnet, "--cgroup-parent", d.cgroup, "--proxy", "127.0.0.1:0"}, d.extra...)
	d.cmd = exec.Command(shoalBin, args...)
	if d.log != nil {
		d.earlier = append(d.earlier, d.log)
	}
	d.log = &bytes.Buffer{}
	d.cmd.Stdout, d.cmd.Stderr = d.log, d.log
	if err := d.cmd.Start(); err != nil {
		t.Fatalf("start daemon: %v", err)
	}
	exited := make(chan error, 1)
	go func() { exited <- d.cmd.Wait() }()
	deadline := time.Now().Add(30 * time.Second)
	for {
		if r := d.shoal("info"); r.code == 0 {
			go func() { <-exited }()
			return
		}
		select {
		case err := <-exited:
			t.Fatalf("daemon exited before it was ready: %v\n%s", err, d.log.String())
		case <-time.After(20 * time.Millisecond):
		}
		if time.Now().After(deadline) {
			t.Fatalf("daemon not ready after 30s\n%s", d.log.String())
		}
	}
}

// stop signals the daemon and waits for it to exit.
func (d *daemon) stop(sig syscall.Signal) {
	if d.cmd == nil || d.cmd.Process == nil {
		return
	}
	d.cmd.Process.Signal(sig)
	for i := 0; i < 3000; i++ {
		if err := d.cmd.Process.Signal(syscall.Signal(0)); err != nil {
			break
		}
		time.Sleep(10 * time.Millisecond)
	}
	d.cmd = nil
}

func (d *daemon) removeAll() {
	d.start()
	// Apps first, or their controllers would replace the replicas removed
	// below.
	var apps []struct {
		Name string `json:"name"`
	}
	if r := d.shoal("app", "ls", "-o", "json"); r.code == 0 {
		json.Unmarshal([]byte(r.stdout), &apps)
	}
	for _, a := range apps {
		if r := d.shoal("app", "rm", a.Name); r.code != 0 {
			d.t.Errorf("cleanup: app rm %s: %s", a.Name, r.stderr)
		}
	}
	r := d.shoal("ps", "-a", "-o", "json")
	for _, line := range strings.Split(r.stdout, "\n") {
		line = strings.TrimSpace(line)
		if strings.HasPrefix(line, `"id": "`) {
			id := strings.TrimSuffix(strings.TrimPrefix(line, `"id": "`), `",`)
			d.shoal("rm", id)
		}
	}
	d.stop(syscall.SIGTERM)
}

type result struct {
	stdout, stderr string
	code           int
}

// shoal runs the CLI against this daemon.
func (d *daemon) shoal(args ...string) result {
	return d.shoalIn(nil, args...)
}

func (d *daemon) shoalIn(stdin []byte, args ...string) result {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, shoalBin, args...)
	cmd.Env = append(os.Environ(), "SHOAL_HOST=unix://"+d.sock)
	var out, errb bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errb
	if stdin != nil {
		cmd.Stdin = bytes.NewReader(stdin)
	}
	err := cmd.Run()
	code := 0
	var ee *exec.ExitError
	if errors.As(err, &ee) {
		code = ee.ExitCode()
	} else if err != nil {
		d.t.Fatalf("shoal %v: %v", args, err)
	}
	return result{out.String(), errb.String(), code}
}

// must runs the CLI and fails the test unless it exits 0.
func (d *daemon) must(args ...string) string {
	d.t.Helper()
	r := d.shoal(args...)
	if r.code != 0 {
		d.t.Fatalf("shoal %s: exit %d\nstdout: %s\nstderr: %s", strings.Join(args, " "), r.code, r.stdout, r.stderr)
	}
	return r.stdout
}

// busybox builds a busybox image tagged tag in this daemon.
func (d *daemon) busybox(tag string) {
	d.t.Helper()
	dir := filepath.Join(d.t.TempDir(), "rootfs")
	if err := imagetest.BusyboxDir(dir); err != nil {
		d.t.Fatalf("busybox-static is needed: %v", err)
	}
	d.must("image", "build", dir, "--tag", tag, "--cmd", "/bin/sh")
}

// netInUse reports whether bridge exists or a rule of iptables-save's
// output nat names its CNI network.
func netInUse(nat, bridge string) bool {
	if _, err := os.Stat("/sys/class/net/" + bridge); err == nil {
		return true
	}
	if others, _ := filepath.Glob("/sys/class/net/" + bridge + "-*"); len(others) > 0 {
		return true
	}
	return strings.Contains(nat, `name: \"shoal-`+bridge+`\"`) || strings.Contains(nat, `name: \"shoal-`+bridge+`-`)
}

// cleanHost checks that the daemon, stopped with nothing left to run,
// took its network with it: no nat rule of its CNI networks, no policy
// table and no bridge, the first nor the others (<bridge>-N)
// (the daemon deletes the bridges when it stops with no namespace left).
// Whatever is left fails the test and is removed.
func (d *daemon) cleanHost() {
	t := d.t
	out, err := exec.Command("iptables-save", "-t", "nat").Output()
	if err != nil {
		t.Errorf("cleanup: iptables-save: %v", err)
	}
	// -A POSTROUTING -s 10.181.9.7/32 -m comment --comment "name: \"shoal-shoale9\" id: \"bridge-…\"" -j CNI-…
	rule := regexp.MustCompile(`^-A POSTROUTING -s (\S+) -m comment --comment "name: \\"(` + regexp.QuoteMeta("shoal-"+d.bridge) +
		`(?:-\d+)?)\\" id: \\"([^\\"]+)\\"" -j (CNI-\S+)`)
	for _, line := range strings.Split(string(out), "\n") {
		m := rule.FindStringSubmatch(line)
		if m == nil {
			continue
		}
		t.Errorf("cleanup: the daemon left the nat rule %s", line)
		comment := fmt.Sprintf("name: %q id: %q", m[2], m[3])
		for _, args := range [][]string{
			{"-D", "POSTROUTING", "-s", m[1], "-m", "comment", "--comment", comment, "-j", m[4]},
			{"-F", m[4]},
			{"-X", m[4]},
		} {
			if out, err := exec.Command("iptables", append([]string{"-w", "-t", "nat"}, args...)...).CombinedOutput(); err != nil {
				t.Errorf("cleanup: iptables %v: %v: %s", args, err, out)
			}
		}
	}
	// The bridge's policy table goes with the last namespace.
	if err := exec.Command("nft", "list", "table", "inet", d.bridge).Run(); err == nil {
		t.Errorf("cleanup: the daemon left its nftables table inet %s", d.bridge)
		if out, err := exec.Command("nft", "delete", "table", "inet", d.bridge).CombinedOutput(); err != nil {
			t.Errorf("cleanup: nft delete table inet %s: %v: %s", d.bridge, err, out)
		}
	}
	others, _ := filepath.Glob("/sys/class/net/" + d.bridge + "-*")
	for _, dir := range append([]string{"/sys/class/net/" + d.bridge}, others...) {
		if _, err := os.Stat(dir); err == nil {
			b := filepath.Base(dir)
			t.Errorf("cleanup: the daemon left its bridge %s", b)
			if out, err := exec.Command("ip", "link", "del", b).CombinedOutput(); err != nil {
				t.Errorf("cleanup: ip link del %s: %v: %s", b, err, out)
			}
		}
	}
	// A replica's disk goes with it: its loop device clears itself once
	// its mount is gone.
	for i := 0; len(loopDevicesUnder(d.dataDir)) > 0; i++ {
		if i == 1000 {
			t.Errorf("cleanup: loop devices of the daemon's disks are left: %v", loopDevicesUnder(d.dataDir))
			break
		}
		time.Sleep(10 * time.Millisecond)
	}
}
