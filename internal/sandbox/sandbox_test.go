package sandbox

import (
	"context"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"net"
	"os"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/shoal-run/shoal/internal/api/types"
	"github.com/shoal-run/shoal/internal/image"
	"github.com/shoal-run/shoal/internal/image/imagetest"
	"github.com/shoal-run/shoal/internal/jobs"
	"github.com/shoal-run/shoal/internal/network"
	"github.com/shoal-run/shoal/internal/runtime"
)

func TestMain(m *testing.M) {
	if os.Geteuid() == 0 {
		// Container inits become this process's children, so their exit
		// status is known.
		if err := runtime.BecomeSubreaper(); err != nil {
			fmt.Fprintln(os.Stderr, err)
			os.Exit(1)
		}
	}
	os.Exit(m.Run())
}

// newSandbox is a Sandbox on a real runc, image store and namespace pool,
// with a cgroup parent and state of its own.
func newSandbox(t *testing.T, userns bool) *Sandbox {
	t.Helper()
	if os.Geteuid() != 0 {
		t.Fatal("sandbox tests need root: they run real containers with runc")
	}
	dir := t.TempDir()
	if userns {
		// The sandbox's init resolves its root and work paths as the
		// mapped uid: every directory on the way must be searchable.
		var err error
		if dir, err = os.MkdirTemp("/tmp", "shoal-jobs-userns-"); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { os.RemoveAll(dir) })
		if err := os.Chmod(dir, 0o710); err != nil {
			t.Fatal(err)
		}
		if err := os.Chown(dir, 0, testHostID); err != nil {
			t.Fatal(err)
		}
	}
	ctx := context.Background()
	parent := fmt.Sprintf("/shoal-jobs-test-%d-%d", os.Getpid(), rand.IntN(1<<30))
	rt, err := runtime.New(ctx, runtime.Options{
		Root: filepath.Join(dir, "containers"), RuntimeRoot: filepath.Join(dir, "runc"), CgroupParent: parent,
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		roots, _ := filepath.Glob("/sys/fs/cgroup/*")
		for _, r := range append(roots, "/sys/fs/cgroup") {
			os.Remove(filepath.Join(r, parent))
		}
	})
	imgs, err := image.Open(filepath.Join(dir, "images"), image.WithLogger(slog.New(slog.DiscardHandler)))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { imgs.Close() })
	imagetest.Busybox(t, imgs, "busybox:1")
	nm, err := network.New(ctx, network.Options{
		StateDir: filepath.Join(dir, "netns"), CNIConfDir: filepath.Join(dir, "cni"),
		Bridge: fmt.Sprintf("shoalj%d", rand.IntN(1000)), Subnet: fmt.Sprintf("10.236.%d.0/24", rand.IntN(250)), PoolSize: 2,
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { nm.Close(context.Background()) })
	work := filepath.Join(dir, "jobs")
	if err := os.Mkdir(work, 0o710); err != nil {
		t.Fatal(err)
	}
	sb := &Sandbox{RT: rt, Images: imgs, Net: nm, Dir: work, UID: 65534, GID: 65534, CPUCheck: 20 * time.Millisecond}
	if userns {
		if err := runtime.UserNSUsable(testHostID, 65536); err != nil {
			t.Fatalf("user namespaces: %v", err)
		}
		os.Chown(work, 0, testHostID)
		sb.UID, sb.GID = 0, 0
		sb.UserNS = &runtime.UserNS{HostID: testHostID, Size: 65536}
	}
	return sb
}

const testHostID = 100000

// modes runs f with a sandbox as uid 65534 without a user namespace, and
// as root in a user namespace mapped to host uid 100000.
func modes(t *testing.T, f func(t *testing.T, sb *Sandbox)) {
	for _, userns := range []bool{false, true} {
		name := "nobody"
		if userns {
			name = "userns"
		}
		t.Run(name, func(t *testing.T) { f(t, newSandbox(t, userns)) })
	}
}

var jobSeq atomic.Int64

// runJob runs req to the end in sb.
func runJob(t *testing.T, sb *Sandbox, req types.JobRequest) jobs.Job {
	t.Helper()
	if req.Image == "" {
		req.Image = "busybox:1"
	}
	p, err := jobs.NewPlan(req, "")
	if err != nil {
		t.Fatal(err)
	}
	j := jobs.Job{ID: fmt.Sprintf("jt%d-%d", os.Getpid(), jobSeq.Add(1))}
	if err := sb.Run(context.Background(), &j, p, func() {}); err != nil {
		t.Fatal(err)
	}
	if left, _ := os.ReadDir(sb.Dir); len(left) != 0 {
		t.Fatalf("work directories left behind: %v", left)
	}
	return j
}

func shStep(script string, l *types.JobLimits) types.JobStep {
	return types.JobStep{Args: []string{"sh", "-c", script}, Limits: l}
}

func oneStep(t *testing.T, sb *Sandbox, script string, l *types.JobLimits) jobs.StepResult {
	t.Helper()
	j := runJob(t, sb, types.JobRequest{Steps: []types.JobStep{shStep(script, l)}})
	if len(j.Steps) != 1 {
		t.Fatalf("steps: %+v", j.Steps)
	}
	return j.Steps[0]
}

func wantStatus(t *testing.T, s jobs.StepResult, status string) {
	t.Helper()
	if s.Status != status {
		t.Fatalf("status %s (exit %d, signal %q, error %q), want %s\nstdout: %.2000s\nstderr: %.2000s", s.Status, s.ExitCode, s.Signal, s.Error, status, s.Stdout, s.Stderr)
	}
}

func TestHelloWorld(t *testing.T) {
	modes(t, func(t *testing.T, sb *Sandbox) {
		s := oneStep(t, sb, "echo hello; echo oops >&2; id -u; cat /proc/self/uid_map", nil)
		wantStatus(t, s, jobs.StepOK)
		// Root in a user namespace is host uid 100000; otherwise nobody.
		uidMap := fmt.Sprintf("%10d %10d %10d\n", 0, 0, uint32(4294967295))
		if sb.UserNS != nil {
			uidMap = fmt.Sprintf("%10d %10d %10d\n", 0, testHostID, 65536)
		}
		if want := fmt.Sprintf("hello\n%d\n%s", sb.UID, uidMap); s.Stdout != want || s.Stderr != "oops\n" {
			t.Fatalf("stdout %q stderr %q, want stdout %q", s.Stdout, s.Stderr, want)
		}
		if s.StartMs <= 0 || s.ExecMs <= 0 || s.TeardownMs <= 0 || s.MemoryPeak == 0 {
			t.Fatalf("timings and memory not measured: %+v", s)
		}
		s = oneStep(t, sb, "exit 3", nil)
		wantStatus(t, s, jobs.StepNonzeroExit)
		if s.ExitCode != 3 {
			t.Fatalf("exit code %d, want 3", s.ExitCode)
		}
		j := runJob(t, sb, types.JobRequest{Steps: []types.JobStep{{Args: []string{"sh", "-c", "exit 3"}, OKCodes: []int{0, 3}}}})
		wantStatus(t, j.Steps[0], jobs.StepOK)
		j = runJob(t, sb, types.JobRequest{Steps: []types.JobStep{{Args: []string{"no-such-command"}}}})
		wantStatus(t, j.Steps[0], jobs.StepNonzeroExit)
		if j.Steps[0].ExitCode != 127 || !strings.Contains(j.Steps[0].Error, "no-such-command") {
			t.Fatalf("missing command: %+v", j.Steps[0])
		}
	})
}

// TestForkBombContained: the pids limit stops the bomb, the wall time
// limit ends the step, and the host can still start sandboxes.
func TestForkBombContained(t *testing.T) {
	modes(t, func(t *testing.T, sb *Sandbox) {
		s := oneStep(t, sb, "(f(){ f | f & }; f) & while :; do :; done", &types.JobLimits{Pids: 32, Timeout: "2s"})
		wantStatus(t, s, jobs.StepTimeout)
		if !strings.Contains(s.Stderr, "fork") {
			t.Fatalf("stderr %q: want the shell's fork failures", s.Stderr)
		}
		wantStatus(t, oneStep(t, sb, "echo alive", nil), jobs.StepOK)
	})
}

func TestMemoryBombIsOOM(t *testing.T) {
	modes(t, func(t *testing.T, sb *Sandbox) {
		s := oneStep(t, sb, "head -c 500m /dev/zero | tail", &types.JobLimits{Memory: "32Mi"})
		wantStatus(t, s, jobs.StepOOM)
		if s.MemoryPeak < 16<<20 {
			t.Fatalf("peak memory %d: want near the 32Mi limit", s.MemoryPeak)
		}
	})
}

func TestEndlessLoopTimesOut(t *testing.T) {
	modes(t, func(t *testing.T, sb *Sandbox) {
		s := oneStep(t, sb, "while :; do :; done", &types.JobLimits{Timeout: "500ms", CPUTime: "10s"})
		wantStatus(t, s, jobs.StepTimeout)
		if s.WallMs < 500 || s.Signal != "killed" {
			t.Fatalf("wall %.1fms signal %q: want killed at the 500ms limit, not before", s.WallMs, s.Signal)
		}
	})
}

func TestCPUTimeLimit(t *testing.T) {
	modes(t, func(t *testing.T, sb *Sandbox) {
		s := oneStep(t, sb, "while :; do :; done", &types.JobLimits{Timeout: "30s", CPUTime: "300ms"})
		wantStatus(t, s, jobs.StepTimeout)
		if s.CPUMs < 300 {
			t.Fatalf("cpu %.1fms: killed before its 300ms of CPU", s.CPUMs)
		}
	})
}

func TestOutputFloodIsCapped(t *testing.T) {
	modes(t, func(t *testing.T, sb *Sandbox) {
		s := oneStep(t, sb, "yes flood", &types.JobLimits{Output: "4Ki"})
		wantStatus(t, s, jobs.StepOutputLimit)
		if len(s.Stdout) != 4096 || !s.StdoutTruncated || !strings.HasPrefix(s.Stdout, "flood\n") {
			t.Fatalf("stdout %d bytes truncated=%v: want exactly the 4Ki cap", len(s.Stdout), s.StdoutTruncated)
		}
		s = oneStep(t, sb, "yes err >&2", &types.JobLimits{Output: "1Ki"})
		wantStatus(t, s, jobs.StepOutputLimit)
		if len(s.Stderr) != 1024 || !s.StderrTruncated {
			t.Fatalf("stderr %d bytes truncated=%v", len(s.Stderr), s.StderrTruncated)
		}
	})
}

// TestNoNetwork: a step sees only a loopback of its own, and cannot reach
// a server on the host's loopback.
func TestNoNetwork(t *testing.T) {
	modes(t, func(t *testing.T, sb *Sandbox) {
		l, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		defer l.Close()
		var accepted atomic.Int32
		go func() {
			for {
				c, err := l.Accept()
				if err != nil {
					return
				}
				accepted.Add(1)
				c.Close()
			}
		}()
		port := l.Addr().(*net.TCPAddr).Port
		// Only lo and no route at all: no packet can leave for any other
		// address, so none is tried.
		s := oneStep(t, sb, fmt.Sprintf(`ip -o link | cut -d: -f2; ip route; ip -6 route
	if nc -w 2 127.0.0.1 %d </dev/null; then echo REACHED; fi; exit 0`, port), nil)
		wantStatus(t, s, jobs.StepOK)
		if strings.TrimSpace(s.Stdout) != "lo" || strings.Contains(s.Stdout, "REACHED") {
			t.Fatalf("network inside the sandbox:\n%s\nstderr: %s", s.Stdout, s.Stderr)
		}
		if accepted.Load() != 0 {
			t.Fatal("the host's loopback server accepted a connection from the sandbox")
		}
	})
}

func TestImageIsReadOnly(t *testing.T) {
	modes(t, func(t *testing.T, sb *Sandbox) {
		j := runJob(t, sb, types.JobRequest{Limits: types.JobLimits{TmpSize: "16Mi", WorkSize: "16Mi"}, Steps: []types.JobStep{shStep(`for f in /bin/x /etc/passwd /x; do if echo x > $f; then echo WROTE $f; fi; done
	echo ok > /work/a && echo ok > /tmp/b && cat /work/a /tmp/b
	if dd if=/dev/zero of=/tmp/big bs=1M count=32 2>/dev/null; then echo BIGTMP; fi
	if dd if=/dev/zero of=/work/big bs=1M count=32 2>/dev/null; then echo BIGWORK; fi
	grep -c Cap /proc/self/status; grep CapEff /proc/self/status; grep NoNewPrivs /proc/self/status; grep Seccomp: /proc/self/status`, nil)}})
		s := j.Steps[0]
		wantStatus(t, s, jobs.StepOK)
		for _, bad := range []string{"WROTE", "BIGTMP", "BIGWORK"} {
			if strings.Contains(s.Stdout, bad) {
				t.Fatalf("sandbox wrote where it must not:\n%s", s.Stdout)
			}
		}
		for _, want := range []string{"ok\nok\n", "CapEff:\t0000000000000000", "NoNewPrivs:\t1", "Seccomp:\t2"} {
			if !strings.Contains(s.Stdout, want) {
				t.Fatalf("stdout lacks %q:\n%s", want, s.Stdout)
			}
		}
		if !strings.Contains(s.Stderr, "Read-only file system") {
			t.Fatalf("stderr %q: want read-only errors", s.Stderr)
		}
	})
}

func TestFilesAndStdinArrive(t *testing.T) {
	modes(t, func(t *testing.T, sb *Sandbox) {
		j := runJob(t, sb, types.JobRequest{
			Files: map[string][]byte{"main.sh": []byte("read x; echo \"got $x\"; cat data/in.txt\n"), "data/in.txt": []byte("file content\n")},
			Steps: []types.JobStep{{Args: []string{"sh", "main.sh"}, Stdin: []byte("stdin line\n")}},
		})
		wantStatus(t, j.Steps[0], jobs.StepOK)
		if j.Steps[0].Stdout != "got stdin line\nfile content\n" {
			t.Fatalf("stdout %q", j.Steps[0].Stdout)
		}
	})
}

// TestTwoStepGrading: a student step writes its answer to the shared work
// directory; a grader step reads it. A grader marked "success" is skipped
// when the student step failed; one marked "always" runs regardless.
func TestTwoStepGrading(t *testing.T) {
	modes(t, func(t *testing.T, sb *Sandbox) {
		grade := func(student string, when string) jobs.Job {
			return runJob(t, sb, types.JobRequest{
				Files: map[string][]byte{"expected.txt": []byte("42\n")},
				Steps: []types.JobStep{
					{Name: "student", Args: []string{"sh", "-c", student}},
					{Name: "grader", If: when, Args: []string{"sh", "-c", `if cmp -s out.txt expected.txt 2>/dev/null || [ "$(cat out.txt 2>/dev/null)" = "$(cat expected.txt)" ]; then echo PASS; else echo FAIL; fi`}},
				},
			})
		}
		j := grade("echo 42 > out.txt", "success")
		wantStatus(t, j.Steps[0], jobs.StepOK)
		wantStatus(t, j.Steps[1], jobs.StepOK)
		if j.Steps[1].Stdout != "PASS\n" {
			t.Fatalf("grader: %q", j.Steps[1].Stdout)
		}
		j = grade("echo 41 > out.txt", "always")
		if j.Steps[1].Stdout != "FAIL\n" {
			t.Fatalf("grader of a wrong answer: %q", j.Steps[1].Stdout)
		}
		j = grade("exit 1", "success")
		wantStatus(t, j.Steps[0], jobs.StepNonzeroExit)
		wantStatus(t, j.Steps[1], jobs.StepSkipped)
		j = grade("exit 1", "always")
		if j.Steps[1].Status != jobs.StepOK || j.Steps[1].Stdout != "FAIL\n" {
			t.Fatalf("grader after a failed student step: %+v", j.Steps[1])
		}
	})
}

func TestCancelKillsStep(t *testing.T) {
	modes(t, func(t *testing.T, sb *Sandbox) {
		p, err := jobs.NewPlan(types.JobRequest{Image: "busybox:1", Steps: []types.JobStep{shStep("sleep 60", nil), shStep("echo never", nil)}}, "")
		if err != nil {
			t.Fatal(err)
		}
		ctx, cancel := context.WithCancel(context.Background())
		go func() { time.Sleep(300 * time.Millisecond); cancel() }()
		j := jobs.Job{ID: "jcancel" + fmt.Sprint(os.Getpid())}
		if err := sb.Run(ctx, &j, p, func() {}); err != nil {
			t.Fatal(err)
		}
		wantStatus(t, j.Steps[0], jobs.StepKilled)
		wantStatus(t, j.Steps[1], jobs.StepKilled)
	})
}

// TestNamespaceReuse: a job that leaves nothing in its network namespace
// hands it to the next job; so does one that closed a connection first
// (IPv4 or, from nc's IPv6 listener, IPv6), since the namespace keeps no
// TIME_WAIT, and the next job sees no trace of it. (A namespace left dirty
// is destroyed: internal/network's TestRecycleDestroysDirtyNamespaces.)
func TestNamespaceReuse(t *testing.T) {
	modes(t, func(t *testing.T, sb *Sandbox) {
		nm := sb.Net.(*network.Manager)
		netns := func(s jobs.StepResult) string {
			t.Helper()
			wantStatus(t, s, jobs.StepOK)
			ns, _, _ := strings.Cut(s.Stdout, "\n")
			if !strings.HasPrefix(ns, "net:[") {
				t.Fatalf("stdout %q: want the namespace first", s.Stdout)
			}
			return ns
		}
		const whoAmI = "readlink /proc/self/ns/net; "
		first := netns(oneStep(t, sb, whoAmI+"echo quiet", nil))
		second := netns(oneStep(t, sb, whoAmI+"echo quiet", nil))
		if second != first {
			t.Fatalf("second job ran in %s, want the clean %s of the first", second, first)
		}
		if s := nm.Stats(); s.Reused != 2 || s.Dirty != 0 {
			t.Fatalf("namespace stats %+v: want 2 reused, none dirty", s)
		}

		s := oneStep(t, sb, whoAmI+`nc -l -p 9000 >/dev/null & sleep 0.3
echo hi | nc 127.0.0.1 9000; wait; cat /proc/net/tcp /proc/net/tcp6`, nil)
		dirty := netns(s)
		tw := 0
		for _, line := range strings.Split(s.Stdout, "\n")[2:] {
			if f := strings.Fields(line); len(f) > 3 && f[3] == "06" {
				tw++
			}
		}
		if tw != 0 {
			t.Fatalf("the job left %d connections in TIME_WAIT:\n%s\nstderr: %s", tw, s.Stdout, s.Stderr)
		}
		s = oneStep(t, sb, whoAmI+"cat /proc/net/tcp /proc/net/tcp6 | wc -l; grep TCP: /proc/net/sockstat", nil)
		if next := netns(s); next != dirty {
			t.Fatalf("the job after the one that closed a connection ran in %s, want its namespace %s", next, dirty)
		}
		// inuse and tw count the namespace's own sockets; orphan, alloc and
		// mem are the whole host's, so other work on it moves them.
		lines := strings.Split(s.Stdout, "\n")
		if len(lines) < 3 || strings.TrimSpace(lines[1]) != "2" || !strings.HasPrefix(lines[2], "TCP: ") {
			t.Fatalf("the next job sees socket state:\n%s", s.Stdout)
		}
		f := strings.Fields(strings.TrimPrefix(lines[2], "TCP: "))
		for i := 0; i+1 < len(f); i += 2 {
			if (f[i] == "inuse" || f[i] == "tw") && f[i+1] != "0" {
				t.Fatalf("the next job sees socket state (%s %s):\n%s", f[i], f[i+1], s.Stdout)
			}
		}
		if !strings.Contains(lines[2], " inuse ") || !strings.Contains(lines[2], " tw ") {
			t.Fatalf("no inuse or tw counter in %q", lines[2])
		}
		if st := nm.Stats(); st.Dirty != 0 || st.Reused != 4 {
			t.Fatalf("namespace stats %+v: want 4 reused, none dirty", st)
		}
	})
}
