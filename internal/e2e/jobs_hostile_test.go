package e2e

import (
	"encoding/json"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/shoal-run/shoal/internal/api/types"
	"github.com/shoal-run/shoal/internal/image/imagetest"
)

// hostileCase is one attack: a job and what must hold of its result.
type hostileCase struct {
	name  string
	req   types.JobRequest
	check func(t *testing.T, j types.Job)
}

// TestJobHostile runs jobs that attack the sandbox, the host and other
// tenants, in a daemon whose sandboxes run in a user namespace and in one
// whose sandboxes run as nobody. After every attack the host's canary file
// keeps its content, owner and mode, nothing appeared beside it, and the
// daemon answers; a victim tenant's job, running all along, ends as it
// would alone, and no work directory or cgroup is left.
func TestJobHostile(t *testing.T) {
	for _, userns := range []bool{true, false} {
		name := "nobody"
		if userns {
			name = "userns"
		}
		t.Run(name, func(t *testing.T) { hostileSuite(t, userns) })
	}
}

func hostileSuite(t *testing.T, userns bool) {
	d := startDaemon(t)
	if userns {
		d.sandboxUserNS()
	}
	d.hostileImage("hostile:1")

	// The host's canary: a root-owned file and directory the jobs name.
	canaryDir := filepath.Join(t.TempDir(), "canary")
	os.Mkdir(canaryDir, 0o700)
	canary := filepath.Join(canaryDir, "secret")
	if err := os.WriteFile(canary, []byte("host secret\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	intact := func(after string) {
		t.Helper()
		var st syscall.Stat_t
		b, err := os.ReadFile(canary)
		if err != nil || string(b) != "host secret\n" || syscall.Lstat(canary, &st) != nil ||
			st.Uid != 0 || st.Gid != 0 || st.Mode != syscall.S_IFREG|0o600 || st.Nlink != 1 {
			t.Fatalf("after %s the host's canary changed: %q %v, mode %o owner %d:%d links %d", after, b, err, st.Mode, st.Uid, st.Gid, st.Nlink)
		}
		if ents, _ := os.ReadDir(canaryDir); len(ents) != 1 {
			t.Fatalf("after %s the canary's directory holds %v", after, ents)
		}
		var h types.Health
		if err := json.Unmarshal([]byte(d.getText("/v1/health")), &h); err != nil || h.Status != "ok" {
			t.Fatalf("after %s the daemon's health: %+v %v", after, h, err)
		}
	}

	// Servers on the host a job must not reach: a TCP port on the host's
	// loopback and an abstract unix socket.
	var reached atomic.Int32
	serve := func(l net.Listener) {
		go func() {
			for {
				c, err := l.Accept()
				if err != nil {
					return
				}
				reached.Add(1)
				c.Close()
			}
		}()
	}
	tcp, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer tcp.Close()
	serve(tcp)
	abstract := fmt.Sprintf("@shoal-hostile-%d-%s", os.Getpid(), name(userns))
	ul, err := net.Listen("unix", abstract)
	if err != nil {
		t.Fatal(err)
	}
	defer ul.Close()
	serve(ul)
	gateway := strings.TrimSuffix(d.subnet, "0/24") + "1"

	// The victim: another tenant's job that keeps a secret in its /work,
	// serves on its loopback and an abstract socket, and checks its secret
	// at the end.
	victim := d.submit(types.JobRequest{Image: "hostile:1", Tenant: "victim", Limits: types.JobLimits{Timeout: "60s"},
		Steps: []types.JobStep{{Args: []string{"sh", "-c", `echo victim-secret > /work/secret
hostile listen 127.0.0.1:7000 & a=$!; hostile listen @victim & b=$!; sleep 20; cat /work/secret; ls /work; kill $a $b; wait`}}}})
	d.waitRunning(victim)

	for _, c := range hostileCases(canary, canaryDir, d.sock, abstract, tcp.Addr().String(), gateway, d.proxyAddr()) {
		if c.req.Image == "" {
			c.req.Image = "hostile:1"
		}
		if c.req.Tenant == "" {
			c.req.Tenant = "attacker"
		}
		j := d.runJob(c.req)
		if j.State != types.JobDone {
			t.Fatalf("%s: job %s (%s), want done", c.name, j.State, j.Error)
		}
		c.check(t, j)
		intact(c.name)
	}
	if n := reached.Load(); n != 0 {
		t.Fatalf("jobs reached the host's loopback or abstract socket %d times", n)
	}
	var v types.Job
	if err := json.Unmarshal([]byte(d.getText("/v1/jobs/"+victim+"?wait=true")), &v); err != nil {
		t.Fatal(err)
	}
	if len(v.Steps) != 1 || v.Steps[0].Status != types.StepOK || !strings.Contains(v.Steps[0].Stdout, "listen 127.0.0.1:7000: ok\n") ||
		!strings.Contains(v.Steps[0].Stdout, "listen @victim: ok\n") || !strings.HasSuffix(v.Steps[0].Stdout, "\nvictim-secret\nsecret\n") ||
		strings.Contains(v.Steps[0].Stdout, "ACCEPTED") {
		t.Fatalf("the victim's job beside the attacks: %+v", v.Steps)
	}
	// Most attacks share a shape, so some ran in a sandbox that an earlier
	// attack had used and that was emptied since (4 or 5 of them in the
	// runs seen; many attacks leave what gets their sandbox dropped, and
	// the next attack then waits for no new one).
	n := counter(t, d.getText("/metrics"), "shoal_job_warm_reused_total")
	if n < 2 {
		t.Fatalf("%v attacks ran in a reused sandbox, want at least 2", n)
	}
	t.Logf("%v attacks ran in a reused sandbox", n)
	d.killedMidRace(canaryDir, intact)
	d.noSandboxLeft()
}

// counter reads a metric without labels from a Prometheus text exposition.
func counter(t *testing.T, metrics, name string) float64 {
	t.Helper()
	for _, line := range strings.Split(metrics, "\n") {
		if v, ok := strings.CutPrefix(line, name+" "); ok {
			f, err := strconv.ParseFloat(strings.TrimSpace(v), 64)
			if err != nil {
				t.Fatalf("metric %s: %v", name, err)
			}
			return f
		}
	}
	t.Fatalf("no metric %s in /metrics", name)
	return 0
}

func name(userns bool) string {
	if userns {
		return "userns"
	}
	return "nobody"
}

// hostileCases are the attacks. canary is a host file (in canaryDir), sock
// the daemon's API socket, abstract and loopback servers on the host, gateway
// the bridge's address (where the self API listens) and proxy the daemon's
// proxy.
func hostileCases(canary, canaryDir, sock, abstract, loopback, gateway, proxy string) []hostileCase {
	sh := func(script string) types.JobStep { return types.JobStep{Args: []string{"sh", "-c", script}} }
	return []hostileCase{
		{name: "symlinks to host paths in /work and over an input directory", req: types.JobRequest{
			Files: map[string][]byte{"in/a.txt": []byte("input\n")},
			Steps: []types.JobStep{
				sh(fmt.Sprintf("ln -s %s /work/canary && ln -s %s /work/dir && ln -s / /work/root && rm -rf in && ln -s %s in && echo planted", canary, canaryDir, canaryDir)),
				sh("echo pwned > /work/canary; echo pwned > in/a.txt; chmod 777 /work/canary /work/dir; chown 0:0 /work/canary; cat /work/canary; ls /work/root/work/dir/; exit 0"),
			}},
			check: func(t *testing.T, j types.Job) {
				wantSteps(t, j, types.StepOK, types.StepOK)
				if j.Steps[0].Stdout != "planted\n" || strings.Contains(j.Steps[1].Stdout, "secret") {
					t.Fatalf("symlinks: %+v", j.Steps)
				}
			}},
		{name: "hard links out of /work and /tmp", req: types.JobRequest{Steps: []types.JobStep{
			sh("echo x > /tmp/t; echo y > /work/y; hostile link /etc/passwd /work/p; hostile link /bin/busybox /tmp/b; hostile link /tmp/t /work/t; hostile link /work/y /tmp/y; hostile link /work/y /work/y2"),
		}}, check: func(t *testing.T, j types.Job) {
			wantSteps(t, j, types.StepOK)
			refused(t, j.Steps[0].Stdout, "link /etc/passwd /work/p", "link /bin/busybox /tmp/b", "link /tmp/t /work/t", "link /work/y /tmp/y")
		}},
		{name: "FIFOs and device nodes in /work and /tmp", req: types.JobRequest{
			Files: map[string][]byte{"in.txt": []byte("input\n")},
			Steps: []types.JobStep{
				sh("rm in.txt; hostile mkfifo /work/fifo /work/in.txt /tmp/fifo; hostile mknod /work/null; hostile mknod /tmp/null; hostile mknod /dev/shm/null"),
				{Args: []string{"sh", "-c", "read x; echo got $x; ls -l /work"}, Stdin: []byte("stdin\n")},
			}},
			check: func(t *testing.T, j types.Job) {
				wantSteps(t, j, types.StepOK, types.StepOK)
				refused(t, j.Steps[0].Stdout, "mknod /work/null", "mknod-block /work/nullb", "mknod /tmp/null", "mknod /dev/shm/null")
				if !strings.HasPrefix(j.Steps[1].Stdout, "got stdin\n") {
					t.Fatalf("the step after the FIFOs: %+v", j.Steps[1])
				}
			}},
		{name: "a work directory swapped for a symlink to / between steps", req: types.JobRequest{Steps: []types.JobStep{
			sh("mkdir /work/sub && rm -rf /work/sub && ln -s / /work/sub"),
			{Args: []string{"sh", "-c", "pwd -P; ls"}, Workdir: "/work/sub"},
			{Args: []string{"sh", "-c", "pwd -P"}, Workdir: "/work/sub/work/made/here"},
		}}, check: func(t *testing.T, j types.Job) {
			wantSteps(t, j, types.StepOK, types.StepOK, types.StepOK)
			if !strings.HasPrefix(j.Steps[1].Stdout, "/\n") || !strings.Contains(j.Steps[1].Stdout, "\nbin\n") || j.Steps[2].Stdout != "/work/made/here\n" {
				t.Fatalf("steps in a symlinked work directory: %+v", j.Steps[1:])
			}
		}},
		{name: "a directory swapped for a symlink while the step ends", req: types.JobRequest{Limits: types.JobLimits{Timeout: "1s"}, Steps: []types.JobStep{
			sh("hostile swap /work & hostile swap /tmp & sleep 0.3; exit 0"),
			{Args: []string{"hostile", "swap", "/work"}},
		}}, check: func(t *testing.T, j types.Job) {
			wantSteps(t, j, types.StepOK, types.StepTimeout)
		}},
		{name: "fork bomb", req: types.JobRequest{Limits: types.JobLimits{Pids: 32, Timeout: "2s"}, Steps: []types.JobStep{
			sh("(f(){ f | f & }; f) & while :; do :; done"),
		}}, check: func(t *testing.T, j types.Job) { wantSteps(t, j, types.StepTimeout) }},
		{name: "memory bomb", req: types.JobRequest{Limits: types.JobLimits{Memory: "32Mi"}, Steps: []types.JobStep{
			sh("head -c 500m /dev/zero | tail"),
		}}, check: func(t *testing.T, j types.Job) { wantSteps(t, j, types.StepOOM) }},
		{name: "disk fill of /work, /tmp and /dev/shm", req: types.JobRequest{Limits: types.JobLimits{WorkSize: "8Mi", TmpSize: "8Mi"}, Steps: []types.JobStep{
			sh("hostile fill /work; hostile fill /tmp; hostile fill /dev/shm"),
		}}, check: func(t *testing.T, j types.Job) {
			wantSteps(t, j, types.StepOK)
			wantFilled(t, j.Steps[0].Stdout, 8<<20, 8<<20, 64<<20)
		}},
		{name: "inode exhaustion of /work, /tmp and /dev/shm", req: types.JobRequest{Limits: types.JobLimits{WorkSize: "8Mi", TmpSize: "8Mi", Timeout: "20s"}, Steps: []types.JobStep{
			sh("hostile inodes /work; hostile inodes /tmp; hostile inodes /dev/shm"),
		}}, check: func(t *testing.T, j types.Job) {
			wantSteps(t, j, types.StepOK)
			lines := strings.Split(strings.TrimSpace(j.Steps[0].Stdout), "\n")
			if len(lines) != 3 {
				t.Fatalf("inodes: %q", j.Steps[0].Stdout)
			}
			for _, l := range lines {
				var n int
				if _, err := fmt.Sscanf(l, "inodes: %d then", &n); err != nil || !strings.HasSuffix(l, "no space left on device") || n > 1<<16 {
					t.Fatalf("inode exhaustion: %q, want ENOSPC at a bound", l)
				}
			}
		}},
		{name: "output flood on stdout and stderr at once", req: types.JobRequest{Limits: types.JobLimits{Output: "4Ki"}, Steps: []types.JobStep{
			sh("yes out & yes err >&2 & wait"),
		}}, check: func(t *testing.T, j types.Job) {
			wantSteps(t, j, types.StepOutputLimit)
			s := j.Steps[0]
			if len(s.Stdout) > 4096 || len(s.Stderr) > 4096 || !(s.StdoutTruncated || s.StderrTruncated) {
				t.Fatalf("flood: stdout %d stderr %d truncated %v %v", len(s.Stdout), len(s.Stderr), s.StdoutTruncated, s.StderrTruncated)
			}
		}},
		{name: "children left behind", req: types.JobRequest{Limits: types.JobLimits{Timeout: "30s"}, Steps: []types.JobStep{
			sh("sleep 1000 & (sleep 1000 >/dev/null 2>&1 &); nohup sleep 1000 >/dev/null 2>&1 & exit 0"),
			sh("ps -o comm | grep -c sleep; exit 0"),
		}}, check: func(t *testing.T, j types.Job) {
			// Had the step waited for its children, it would have timed out.
			wantSteps(t, j, types.StepOK, types.StepOK)
			if j.Steps[1].Stdout != "0\n" {
				t.Fatalf("the next step sees the last one's children: %q", j.Steps[1].Stdout)
			}
		}},
		{name: "ptrace, mount, unshare, keyctl, bpf and other privileged calls", req: types.JobRequest{Steps: []types.JobStep{
			{Args: []string{"hostile", "syscalls"}},
		}}, check: func(t *testing.T, j types.Job) {
			wantSteps(t, j, types.StepOK)
			lines := strings.Split(strings.TrimSpace(j.Steps[0].Stdout), "\n")
			if len(lines) < 28 {
				t.Fatalf("syscalls: %q %q", j.Steps[0].Stdout, j.Steps[0].Stderr)
			}
			refused(t, j.Steps[0].Stdout, lines...)
		}},
		{name: "raw and packet sockets", req: types.JobRequest{Steps: []types.JobStep{{Args: []string{"hostile", "sockets"}}}},
			check: func(t *testing.T, j types.Job) {
				wantSteps(t, j, types.StepOK)
				refused(t, j.Steps[0].Stdout, "raw-inet", "raw-inet6", "raw-inet-tcp", "packet", "packet-dgram", "lo-down")
			}},
		{name: "the host's loopback, the daemon's sockets, the self API and the proxy", req: types.JobRequest{Steps: []types.JobStep{
			{Args: []string{"hostile", "connect", loopback, gateway + ":7071", proxy}},
			{Args: []string{"hostile", "unix", sock, abstract, "@/var/run/docker.sock"}},
		}}, check: func(t *testing.T, j types.Job) {
			wantSteps(t, j, types.StepOK, types.StepOK)
			refused(t, j.Steps[0].Stdout, "connect "+loopback, "connect "+gateway+":7071", "connect "+proxy)
			refused(t, j.Steps[1].Stdout, "unix "+sock, "unix "+abstract)
		}},
		{name: "another tenant's job", req: types.JobRequest{Steps: []types.JobStep{
			sh("ps -o comm | grep -c sleep; grep -rls victim-secret /work /tmp /dev/shm /run /var /root; ls /proc | grep -c '^[0-9]'; hostile connect 127.0.0.1:7000; hostile unix @victim; exit 0"),
		}}, check: func(t *testing.T, j types.Job) {
			wantSteps(t, j, types.StepOK)
			out := j.Steps[0].Stdout
			if !strings.HasPrefix(out, "0\n") || strings.Contains(out, "/secret") {
				t.Fatalf("another tenant's job is visible: %q", out)
			}
			refused(t, out, "connect 127.0.0.1:7000", "unix @victim")
		}},
	}
}

// wantSteps checks the steps' statuses.
func wantSteps(t *testing.T, j types.Job, status ...string) {
	t.Helper()
	if len(j.Steps) != len(status) {
		t.Fatalf("job %s: %d steps, want %d: %+v", j.ID, len(j.Steps), len(status), j.Steps)
	}
	for i, s := range j.Steps {
		if s.Status != status[i] {
			t.Fatalf("job %s step %d: %s (exit %d %s, %s), want %s\nstdout: %.3000s\nstderr: %.3000s", j.ID, i, s.Status, s.ExitCode, s.Signal, s.Error, status[i], s.Stdout, s.Stderr)
		}
	}
}

// refused checks that the probe's output has a line for each attempt (a
// prefix of "NAME: RESULT") and that none succeeded.
func refused(t *testing.T, out string, attempts ...string) {
	t.Helper()
	lines := strings.Split(out, "\n")
	for _, a := range attempts {
		found := false
		for _, l := range lines {
			if strings.HasPrefix(l, a) && strings.Contains(l, ": ") {
				found = true
				if strings.HasSuffix(l, ": ok") {
					t.Fatalf("%q was allowed:\n%s", l, out)
				}
			}
		}
		if !found {
			t.Fatalf("no result for %q in:\n%s", a, out)
		}
	}
}

// wantFilled checks that each fill stopped with ENOSPC at its bound.
func wantFilled(t *testing.T, out string, bounds ...int64) {
	t.Helper()
	lines := strings.Split(strings.TrimSpace(out), "\n")
	if len(lines) != len(bounds) {
		t.Fatalf("fill: %q", out)
	}
	for i, l := range lines {
		var n int64
		if _, err := fmt.Sscanf(l, "fill: %d bytes", &n); err != nil || n > bounds[i] || !strings.HasSuffix(l, "no space left on device") {
			t.Fatalf("fill: %q, want no space left within %d bytes", l, bounds[i])
		}
	}
}

// submit queues a job and returns its id.
func (d *daemon) submit(req types.JobRequest) string {
	d.t.Helper()
	body, _ := json.Marshal(req)
	code, _, raw := d.post("/v1/jobs", body)
	var j types.Job
	if code != 202 || json.Unmarshal(raw, &j) != nil {
		d.t.Fatalf("submit: %d %s", code, raw)
	}
	return j.ID
}

// runJob submits a job and waits for its end.
func (d *daemon) runJob(req types.JobRequest) types.Job {
	d.t.Helper()
	body, _ := json.Marshal(req)
	code, _, raw := d.post("/v1/jobs?wait=true", body)
	var j types.Job
	if code != 200 || json.Unmarshal(raw, &j) != nil {
		d.t.Fatalf("run job: %d %s", code, raw)
	}
	return j
}

// sandboxUserNS restarts the daemon with the path to its data dir
// searchable, so that its sandboxes run in a user namespace.
func (d *daemon) sandboxUserNS() {
	t := d.t
	t.Helper()
	for p := filepath.Dir(d.dataDir); p != os.TempDir() && p != "/"; p = filepath.Dir(p) {
		fi, err := os.Stat(p)
		if err != nil {
			t.Fatal(err)
		}
		if err := os.Chmod(p, fi.Mode().Perm()|0o001); err != nil {
			t.Fatal(err)
		}
	}
	d.stop(syscall.SIGTERM)
	d.start()
	if out := d.must("info"); !strings.Contains(out, "user namespace mapped to host uids 100000-165535") {
		t.Fatalf("info after making the path searchable:\n%s", out)
	}
}

// hostileImage builds busybox with the hostile probe at /bin/hostile.
func (d *daemon) hostileImage(tag string) {
	t := d.t
	t.Helper()
	dir := filepath.Join(t.TempDir(), "rootfs")
	if err := imagetest.BusyboxDir(dir); err != nil {
		t.Fatalf("busybox-static is needed: %v", err)
	}
	for _, a := range []string{"nohup", "mkfifo"} {
		os.Symlink("busybox", filepath.Join(dir, "bin", a))
	}
	cmd := exec.Command("go", "build", "-o", filepath.Join(dir, "bin", "hostile"), "./testdata/hostile")
	cmd.Env = append(os.Environ(), "CGO_ENABLED=0")
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("build the hostile probe: %v\n%s", err, out)
	}
	d.must("image", "build", dir, "--tag", tag, "--cmd", "/bin/sh")
}

// killedMidRace kills the daemon while a job swaps a directory of its work
// directory for a symlink to the canary's directory and back; the next
// daemon removes the work directory without following the link, and the
// job runs again.
func (d *daemon) killedMidRace(canaryDir string, intact func(string)) {
	t := d.t
	t.Helper()
	id := d.submit(types.JobRequest{Image: "hostile:1", Limits: types.JobLimits{Timeout: "2s"}, Steps: []types.JobStep{{Args: []string{"sh", "-c",
		fmt.Sprintf("ln -s %s /work/canary; mkdir -p /work/in/a/b; hostile swap /work/in & hostile swap /work & hostile swap /tmp; wait", canaryDir)}}}})
	d.waitRunning(id)
	killed := time.Now()
	d.stop(syscall.SIGKILL)
	d.start()
	var j types.Job
	if err := json.Unmarshal([]byte(d.getText("/v1/jobs/"+id+"?wait=true")), &j); err != nil {
		t.Fatal(err)
	}
	// Run again after the restart: its start is stored a moment after it
	// starts, so the attempt killed may or may not be counted, but the run
	// that ended began after the kill.
	if j.State != types.JobDone || j.Attempts < 1 || j.Started == nil || !j.Started.After(killed) {
		t.Fatalf("the job killed mid-race: %s (%s), attempts %d, started %v (killed at %v)", j.State, j.Error, j.Attempts, j.Started, killed)
	}
	intact("a daemon killed while a job raced symlinks in /work")
}

// noSandboxLeft waits, bounded, for the sandboxes' teardown (which follows
// their answer) and fails if a work directory or cgroup is left.
func (d *daemon) noSandboxLeft() {
	t := d.t
	t.Helper()
	var left []string
	waitFor(t, "no sandbox left", func() bool {
		left = append(cgroupChildren(d.cgroup), cgroupChildren(d.cgroup+"-jobs")...)
		for _, dir := range []string{filepath.Join(d.dataDir, "jobs"), filepath.Join(d.dataDir+".sandbox", "jobs")} {
			work, _ := os.ReadDir(dir)
			for _, w := range work {
				left = append(left, filepath.Join(dir, w.Name()))
			}
		}
		return len(left) == 0
	})
}
