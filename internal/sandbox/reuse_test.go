package sandbox

import (
	"context"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	goruntime "runtime"
	"strings"
	"syscall"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/shoal-run/shoal/internal/api/types"
	"github.com/shoal-run/shoal/internal/jobs"
	"github.com/shoal-run/shoal/internal/sandbox/stub/stubtest"
)

// reusing readies sb to keep one reusable sandbox.
func reusing(t *testing.T, sb *Sandbox) {
	t.Helper()
	sb.Stub = filepath.Join(filepath.Dir(sb.Dir), "shoal-init")
	if err := stubtest.Build(sb.Stub); err != nil {
		t.Fatal(err)
	}
	if err := os.Chmod(sb.Stub, 0o755); err != nil {
		t.Fatal(err)
	}
	sb.Warm, sb.Reuse = 1, true
	sb.Log = slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelWarn}))
	t.Cleanup(sb.Close)
}

// runIn runs req (on busybox) to its end in sb.
func runIn(t *testing.T, sb *Sandbox, req types.JobRequest) jobs.Job {
	t.Helper()
	req.Image = "busybox:1"
	p, err := jobs.NewPlan(req, "")
	if err != nil {
		t.Fatal(err)
	}
	j := jobs.Job{ID: fmt.Sprintf("jr%d-%d", os.Getpid(), jobSeq.Add(1))}
	if err := sb.Run(context.Background(), &j, p, func() {}); err != nil {
		t.Fatal(err)
	}
	sb.pool.releases.Wait() // its sandbox back in the pool: the next job finds it
	return j
}

// untilReused runs script until a job runs in a sandbox an earlier job
// used, and returns that job's first step.
func untilReused(t *testing.T, sb *Sandbox, req types.JobRequest) jobs.StepResult {
	t.Helper()
	before := sb.WarmStats().Reused
	for i := 0; i < 30; i++ {
		j := runIn(t, sb, req)
		if sb.WarmStats().Reused > before {
			return j.Steps[0]
		}
	}
	t.Fatalf("no job ran in a reused sandbox: %+v", sb.WarmStats())
	return jobs.StepResult{}
}

// TestReusedSandbox: a job in a reused sandbox runs its command with its
// stdin, environment, directory and files, and its later steps (in the
// same sandbox: TestReusedSandboxLaterSteps), as in a fresh one.
func TestReusedSandbox(t *testing.T) {
	modes(t, func(t *testing.T, sb *Sandbox) {
		reusing(t, sb)
		req := types.JobRequest{Env: []string{"A=job"}, Files: map[string][]byte{"in/x": []byte("file\n")}, Steps: []types.JobStep{
			{Args: []string{"sh", "-c", `read l; echo "$l $A $B $(pwd) $(cat x)"`}, Env: []string{"B=step"}, Workdir: "/work/in", Stdin: []byte("stdin\n")},
			shStep("cat in/x", nil),
		}}
		st := untilReused(t, sb, req)
		wantStatus(t, st, jobs.StepOK)
		if st.Stdout != "stdin job step /work/in file\n" || st.MemoryPeak == 0 || st.CPUMs <= 0 {
			t.Fatalf("a job in a reused sandbox: %+v", st)
		}
		missing := untilReused(t, sb, types.JobRequest{Steps: []types.JobStep{{Args: []string{"no-such-command"}}}})
		if missing.Status != jobs.StepNonzeroExit || missing.ExitCode != 127 || !strings.Contains(missing.Error, "no-such-command") {
			t.Fatalf("a missing command in a reused sandbox: %+v", missing)
		}
		sb.Close()
		if left, _ := os.ReadDir(sb.Dir); len(left) != 0 {
			t.Fatalf("left after Close: %v", left)
		}
	})
}

// state is what a job can see of what earlier jobs left: the entries of
// every writable directory, their modes and owners, /dev's links, System V
// IPC objects and other processes.
const state = `ls -A /work /tmp /dev /dev/shm /dev/mqueue; stat -c '%n %a %u %g' /work /tmp /dev /dev/shm /dev/mqueue
readlink /dev/fd /dev/stdin /dev/stdout /dev/stderr; cat /proc/sysvipc/msg /proc/sysvipc/sem /proc/sysvipc/shm | wc -l
ps -o stat,comm`

// servedBy is a shell line printing the start time of the sandbox's pid 1:
// the same in two jobs, they ran in the same sandbox.
const servedBy = `echo "box $(cut -d' ' -f22 /proc/1/stat)"`

// TestReusedSandboxIsEmptied: whatever a job leaves in a reusable sandbox
// (files and links in /work, /tmp, /dev/shm, /dev/mqueue and /dev, a
// chmod-ed /tmp, links of /dev removed, System V IPC objects, processes
// still running), and its attempts to kill, stop or crash the sandbox's
// process, the next job in the same sandbox finds it as a fresh one; and
// each job's CPU time and peak memory are its own.
func TestReusedSandboxIsEmptied(t *testing.T) {
	modes(t, func(t *testing.T, sb *Sandbox) {
		reusing(t, sb)
		fresh := untilReused(t, sb, types.JobRequest{Steps: []types.JobStep{shStep(state, nil)}})
		wantStatus(t, fresh, jobs.StepOK)

		// Leftovers the job cannot make itself (busybox has no ipcmk).
		sb.pool.mu.Lock()
		if len(sb.pool.ready) != 1 {
			sb.pool.mu.Unlock()
			t.Fatalf("%d sandboxes ready, want 1", len(sb.pool.ready))
		}
		pid := sb.pool.ready[0].z.pid
		sb.pool.mu.Unlock()
		makeIPC(t, pid)

		dirty := runIn(t, sb, types.JobRequest{Files: map[string][]byte{"in/x": []byte("x")}, Steps: []types.JobStep{shStep(servedBy+`
echo a > /work/left; mkdir -p /work/d/e; ln -s /etc/passwd /work/link
echo t > /tmp/left; mkdir /tmp/d
dd if=/dev/zero of=/dev/shm/big bs=1M count=24 2>/dev/null
echo q > /dev/mqueue/q
echo d > /dev/left; rm -f /dev/fd /dev/stdin; ln -s /work /dev/stdout.x
chmod 0 /tmp /work /dev/shm 2>/dev/null
(setsid sleep 1000 &); nohup sleep 999 >/dev/null 2>&1 &
for s in TERM INT HUP QUIT ABRT SEGV USR1 PIPE STOP KILL; do kill -$s 1; done
true`, nil)}})
		wantStatus(t, dirty.Steps[0], jobs.StepOK)
		after := runIn(t, sb, types.JobRequest{Steps: []types.JobStep{shStep(servedBy+"\n"+state, nil)}})
		wantStatus(t, after.Steps[0], jobs.StepOK)
		box, rest, _ := strings.Cut(after.Steps[0].Stdout, "\n")
		if !strings.HasPrefix(dirty.Steps[0].Stdout, box+"\n") {
			t.Fatalf("the next job ran in another sandbox (%q, then %q): the first was dropped", dirty.Steps[0].Stdout, box)
		}
		if rest != fresh.Stdout {
			t.Fatalf("after a job that left things behind, the next job in its sandbox sees\n%s\nwant, as in a fresh one,\n%s", rest, fresh.Stdout)
		}
		if d, a := dirty.Steps[0].MemoryPeak, after.Steps[0].MemoryPeak; d < 24<<20 || a >= 24<<20 {
			t.Fatalf("peak memory %d then %d: want each job's own (24 MiB in /dev/shm, then none)", d, a)
		}
	})
}

// makeIPC makes a System V message queue, semaphore set and shared memory
// segment in the IPC namespace of process pid.
func makeIPC(t *testing.T, pid int) {
	t.Helper()
	ns, err := os.Open(fmt.Sprintf("/proc/%d/ns/ipc", pid))
	if err != nil {
		t.Fatal(err)
	}
	defer ns.Close()
	errc := make(chan error, 1)
	go func() {
		goruntime.LockOSThread() // never unlocked: the thread ends with the goroutine
		if err := unix.Setns(int(ns.Fd()), unix.CLONE_NEWIPC); err != nil {
			errc <- err
			return
		}
		if _, _, e := unix.Syscall(unix.SYS_MSGGET, 0, unix.IPC_CREAT|0o600, 0); e != 0 {
			errc <- e
			return
		}
		if _, _, e := unix.Syscall(unix.SYS_SEMGET, 0, 1, unix.IPC_CREAT|0o600); e != 0 {
			errc <- e
			return
		}
		_, err := unix.SysvShmGet(0, 4096, unix.IPC_CREAT|0o600)
		errc <- err
	}()
	if err := <-errc; err != nil {
		t.Fatalf("System V IPC objects in the sandbox: %v", err)
	}
}

// TestReusedSandboxLimits: jobs with other limits run one after another in
// the same reusable sandbox, each held to its own: memory (OOM), pids (a
// fork bomb), wall time, CPU time, output, and a CPU quota; the sandbox
// serves the next job after each.
func TestReusedSandboxLimits(t *testing.T) {
	modes(t, func(t *testing.T, sb *Sandbox) {
		reusing(t, sb)
		untilReused(t, sb, types.JobRequest{Steps: []types.JobStep{shStep("true", nil)}})
		var box string
		for _, c := range []struct {
			script, status string
			l              *types.JobLimits
			check          func(s jobs.StepResult) bool
		}{
			{"head -c 500m /dev/zero | tail", jobs.StepOOM, &types.JobLimits{Memory: "32Mi"},
				func(s jobs.StepResult) bool { return s.MemoryPeak >= 16<<20 }},
			{"(f(){ f | f & }; f) & while :; do :; done", jobs.StepTimeout, &types.JobLimits{Pids: 32, Timeout: "2s"},
				func(s jobs.StepResult) bool { return strings.Contains(s.Stderr, "fork") }},
			{"while :; do :; done", jobs.StepTimeout, &types.JobLimits{Timeout: "500ms", CPUTime: "10s"},
				func(s jobs.StepResult) bool { return s.WallMs >= 500 && s.Signal == "killed" }},
			{"while :; do :; done", jobs.StepTimeout, &types.JobLimits{Timeout: "30s", CPUTime: "300ms"},
				func(s jobs.StepResult) bool { return s.CPUMs >= 300 }},
			{"yes flood", jobs.StepOutputLimit, &types.JobLimits{Output: "4Ki"},
				func(s jobs.StepResult) bool { return len(s.Stdout) == 4096 && s.StdoutTruncated }},
			// A quarter of a core: a second of spinning gets about 250ms of CPU.
			{"timeout 1 sh -c 'while :; do :; done'; true", jobs.StepOK, &types.JobLimits{CPUs: 0.25},
				func(s jobs.StepResult) bool { return s.CPUMs < 600 }},
		} {
			j := runIn(t, sb, types.JobRequest{Limits: limitsOr(c.l), Steps: []types.JobStep{shStep(servedBy+"\n"+c.script, nil)}})
			s := j.Steps[0]
			got, _, _ := strings.Cut(s.Stdout, "\n")
			if box == "" {
				box = got
			}
			if got != box {
				t.Fatalf("%q ran in sandbox %q, the jobs before in %q", c.script, got, box)
			}
			wantStatus(t, s, c.status)
			if !c.check(s) {
				t.Fatalf("%q: %+v", c.script, s)
			}
		}
	})
}

func limitsOr(l *types.JobLimits) types.JobLimits {
	if l == nil {
		return types.JobLimits{}
	}
	return *l
}

// TestReusedSandboxProcessTampered: a job that changes what the sandbox's
// process hands down to the next job's (its nice value, CPU affinity, I/O
// priority, OOM score adjustment or core dump filter) or shows it (its
// autogroup's nice value) gets the sandbox dropped: the next job runs in
// another one, with none of it.
func TestReusedSandboxProcessTampered(t *testing.T) {
	modes(t, func(t *testing.T, sb *Sandbox) {
		reusing(t, sb)
		const inherited = `echo "nice $(cut -d' ' -f19 /proc/self/stat) $(grep Cpus_allowed_list /proc/self/status) oom $(cat /proc/self/oom_score_adj)"
echo "core $(cat /proc/self/coredump_filter) sandbox's autogroup $(cut -d' ' -f2- /proc/1/autogroup)"`
		fresh := untilReused(t, sb, types.JobRequest{Steps: []types.JobStep{shStep(inherited, nil)}})
		for _, tamper := range []string{
			"renice -n 10 -p 1",
			"for t in /proc/1/task/*; do taskset -p 1 ${t##*/}; done",
			"ionice -c 3 -p 1",
			"echo 900 > /proc/1/oom_score_adj",
			"renice -n 5 -p $(ls /proc/1/task | tail -1)",
			"echo 0x7f > /proc/1/coredump_filter",
			"echo 5 > /proc/1/autogroup",
		} {
			untilReused(t, sb, types.JobRequest{Steps: []types.JobStep{shStep("true", nil)}})
			before := runIn(t, sb, types.JobRequest{Steps: []types.JobStep{shStep(servedBy+"; ("+tamper+") >/dev/null 2>&1 && echo tampered; true", nil)}})
			after := runIn(t, sb, types.JobRequest{Steps: []types.JobStep{shStep(servedBy+"; "+inherited, nil)}})
			box, got, _ := strings.Cut(after.Steps[0].Stdout, "\n")
			if got != fresh.Stdout {
				t.Fatalf("after %q the next job inherits %q, want %q", tamper, got, fresh.Stdout)
			}
			// A change refused leaves nothing to drop the sandbox for.
			if before.Steps[0].Stdout == box+"\ntampered\n" {
				t.Fatalf("after %q the next job ran in the same sandbox", tamper)
			}
		}
	})
}

// TestReusedSandboxEndsWithDaemon: when the daemon's end of a reusable
// sandbox's control socket closes mid-step, the step ends as an internal
// error, not after its hour of sleep, and the sandbox's process is gone.
// (That the process ends by itself when the daemon dies, taking the step
// with it, is TestJobKilledDaemonLeavesNoStep's, in internal/e2e.)
func TestReusedSandboxEndsWithDaemon(t *testing.T) {
	modes(t, func(t *testing.T, sb *Sandbox) {
		reusing(t, sb)
		untilReused(t, sb, types.JobRequest{Steps: []types.JobStep{shStep("true", nil)}})
		sb.pool.mu.Lock()
		z := sb.pool.ready[0].z
		sb.pool.mu.Unlock()
		done := make(chan jobs.Job, 1)
		go func() {
			done <- runIn(t, sb, types.JobRequest{Limits: types.JobLimits{Timeout: "60s"}, Steps: []types.JobStep{shStep("(setsid sleep 1000 &); echo up; sleep 1000", nil)}})
		}()
		// The step is up once its cgroup lists its processes.
		for i := 0; ; i++ {
			if procs, _ := z.cg.Child(fmt.Sprintf("step%d", z.seq)).Procs(); len(procs) >= 2 {
				break
			}
			if i == 2000 {
				t.Fatal("the step never started")
			}
			time.Sleep(5 * time.Millisecond)
		}
		z.ctl.CloseWrite()
		z.ctl.CloseRead()
		j := <-done
		s := j.Steps[0]
		if s.Status != jobs.StepInternalError || !strings.Contains(s.Error, "sandbox process") {
			t.Fatalf("a step whose sandbox's process ended: %+v", s)
		}
		if err := syscall.Kill(z.pid, 0); err != syscall.ESRCH {
			t.Fatalf("the sandbox's process %d is still there (%v)", z.pid, err)
		}
	})
}

// TestReusedSandboxDiedWhileWaiting: a reusable sandbox whose process
// ended while it waited for a job is dropped when a job takes it, and the
// job runs on the ordinary path rather than fail with it.
func TestReusedSandboxDiedWhileWaiting(t *testing.T) {
	modes(t, func(t *testing.T, sb *Sandbox) {
		reusing(t, sb)
		untilReused(t, sb, types.JobRequest{Steps: []types.JobStep{shStep("true", nil)}})
		sb.pool.mu.Lock()
		if len(sb.pool.ready) != 1 {
			sb.pool.mu.Unlock()
			t.Fatalf("%d sandboxes ready, want 1", len(sb.pool.ready))
		}
		z := sb.pool.ready[0].z
		sb.pool.mu.Unlock()
		if err := syscall.Kill(z.pid, syscall.SIGKILL); err != nil {
			t.Fatal(err)
		}
		for i := 0; syscall.Kill(z.pid, 0) == nil; i++ {
			if i == 1000 {
				t.Fatal("the sandbox's process did not end")
			}
			time.Sleep(5 * time.Millisecond)
		}
		j := runIn(t, sb, types.JobRequest{Steps: []types.JobStep{shStep("echo ok", nil)}})
		if s := j.Steps[0]; s.Status != jobs.StepOK || s.Stdout != "ok\n" {
			t.Fatalf("a job after its sandbox's process ended: %+v", s)
		}
	})
}
