package sandbox

import (
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"

	"golang.org/x/sys/unix"

	"github.com/shoal-run/shoal/internal/api/types"
	"github.com/shoal-run/shoal/internal/jobs"
)

var probeBin struct {
	once sync.Once
	b    []byte
	err  error
}

// probed is req with the probe (testdata/probe) at /work/probe, and its
// first step's script run after making it executable.
func probed(t *testing.T, script string) types.JobRequest {
	t.Helper()
	probeBin.once.Do(func() {
		out := filepath.Join(os.TempDir(), "shoal-jobs-probe-"+strings.ReplaceAll(t.Name(), "/", "-"))
		defer os.Remove(out)
		cmd := exec.Command("go", "build", "-ldflags=-s", "-o", out, "./testdata/probe")
		cmd.Env = append(os.Environ(), "CGO_ENABLED=0")
		if msg, err := cmd.CombinedOutput(); err != nil {
			probeBin.err = err
			probeBin.b = msg
			return
		}
		probeBin.b, probeBin.err = os.ReadFile(out)
	})
	if probeBin.err != nil {
		t.Fatalf("build the probe: %v\n%s", probeBin.err, probeBin.b)
	}
	return types.JobRequest{Files: map[string][]byte{"probe": probeBin.b},
		Steps: []types.JobStep{shStep("chmod +x /work/probe\n"+script, nil)}}
}

// sameBox runs a job that leaves something behind (its output must hold
// want), then the next job, which must run in the same sandbox and see
// what a job sees in a fresh one (fresh: next's first step's output there).
// The caller has made both requests before the last job (a probe built in
// between could take longer than WarmIdle under load, and the pool drop
// its idle sandbox).
func sameBox(t *testing.T, sb *Sandbox, dirty types.JobRequest, want string, next types.JobRequest, fresh string) jobs.StepResult {
	t.Helper()
	before := sb.WarmStats()
	dirty.Steps[0].Args[2] = servedBy + "\n" + dirty.Steps[0].Args[2]
	d := runIn(t, sb, dirty)
	wantStatus(t, d.Steps[0], jobs.StepOK)
	if !strings.Contains(d.Steps[0].Stdout, want) {
		t.Fatalf("the job leaving things behind printed\n%s\nwant %q in it", d.Steps[0].Stdout, want)
	}
	next.Steps[0].Args[2] = servedBy + "\n" + next.Steps[0].Args[2]
	after := runIn(t, sb, next)
	wantStatus(t, after.Steps[0], jobs.StepOK)
	box, rest, _ := strings.Cut(after.Steps[0].Stdout, "\n")
	// Both jobs ran in a used sandbox, the same (two started in one clock
	// tick have the same start time, so servedBy alone could be fooled).
	if now := sb.WarmStats(); !strings.HasPrefix(d.Steps[0].Stdout, box+"\n") || now.Reused != before.Reused+2 {
		t.Fatalf("the next job ran in another sandbox (%q, then %q): the first was dropped (warm sandboxes before the jobs %+v, after %+v)",
			d.Steps[0].Stdout, box, before, now)
	}
	if rest != fresh {
		t.Fatalf("the next job in the sandbox sees\n%s\nwant, as in a fresh one,\n%s", rest, fresh)
	}
	return after.Steps[0]
}

// TestReusedSandboxDeepTree: directory chains deeper than the daemon may
// hold descriptors, left in /work, /tmp, /dev/shm and (in a user
// namespace, where the job owns it) /dev, are emptied all the same, and
// the sandbox serves the next job.
func TestReusedSandboxDeepTree(t *testing.T) {
	modes(t, func(t *testing.T, sb *Sandbox) {
		reusing(t, sb)
		const depth = "1500"
		// Made (the probe built) before the sandbox is reused, not
		// between its jobs: see sameBox.
		dirty := probed(t, `for d in /work /tmp /dev/shm; do ./probe deep $d `+depth+`; done
rm -f /dev/stdin 2>/dev/null && mkdir /dev/stdin && ./probe deep /dev/stdin `+depth+`
true`)
		fresh := untilReused(t, sb, types.JobRequest{Steps: []types.JobStep{shStep(state, nil)}})
		wantStatus(t, fresh, jobs.StepOK)
		// The daemon's descriptors are fewer than a chain's levels.
		var lim unix.Rlimit
		if err := unix.Getrlimit(unix.RLIMIT_NOFILE, &lim); err != nil {
			t.Fatal(err)
		}
		low := lim
		low.Cur = 1024
		if err := unix.Setrlimit(unix.RLIMIT_NOFILE, &low); err != nil {
			t.Fatal(err)
		}
		defer unix.Setrlimit(unix.RLIMIT_NOFILE, &lim)
		sameBox(t, sb, dirty, "deep /dev/shm: ok", types.JobRequest{Steps: []types.JobStep{shStep(state, nil)}}, fresh.Stdout)
	})
}

// TestReusedSandboxDevPts: a job that takes the modes off /dev/pts and
// /dev/pts/ptmx (it owns them in a user namespace) leaves the next job
// in its sandbox both as in a fresh one.
func TestReusedSandboxDevPts(t *testing.T) {
	modes(t, func(t *testing.T, sb *Sandbox) {
		reusing(t, sb)
		const pts = `stat -c '%n %a %u %g' /dev/pts /dev/pts/ptmx 2>&1; true`
		fresh := untilReused(t, sb, types.JobRequest{Steps: []types.JobStep{shStep(pts, nil)}})
		wantStatus(t, fresh, jobs.StepOK)
		want := "changed"
		if sb.UserNS == nil {
			want = "refused" // root's: the job cannot change them
		}
		sameBox(t, sb, types.JobRequest{Steps: []types.JobStep{shStep(`(chmod 0 /dev/pts/ptmx && chmod 0 /dev/pts) 2>/dev/null && echo changed || echo refused`, nil)}},
			want, types.JobRequest{Steps: []types.JobStep{shStep(pts, nil)}}, fresh.Stdout)
	})
}

// TestReusedSandboxNetwork: a job that closes a TCP connection first
// leaves none in TIME_WAIT in its sandbox's network namespace (which would
// keep the next job from listening on that port, and the sandbox from
// being reused): the next job runs in the same sandbox and finds the
// namespace as a fresh one.
func TestReusedSandboxNetwork(t *testing.T) {
	modes(t, func(t *testing.T, sb *Sandbox) {
		reusing(t, sb)
		const check = "./probe bind 5555; grep -o 'sockets: used [0-9]*' /proc/net/sockstat; grep -o 'tw [0-9]*' /proc/net/sockstat"
		fresh := untilReused(t, sb, probed(t, check))
		wantStatus(t, fresh, jobs.StepOK)
		if !strings.HasPrefix(fresh.Stdout, "bind: ok\n") {
			t.Fatalf("a fresh sandbox: %s", fresh.Stdout)
		}
		untilReused(t, sb, types.JobRequest{Steps: []types.JobStep{shStep("true", nil)}})
		d := runIn(t, sb, probed(t, servedBy+"\n./probe timewait 5555; grep -o 'tw [0-9]*' /proc/net/sockstat"))
		wantStatus(t, d.Steps[0], jobs.StepOK)
		box, closed, _ := strings.Cut(d.Steps[0].Stdout, "\n")
		if closed != "timewait: ok\ntw 0\n" {
			t.Fatalf("the job closing a connection first: %s", d.Steps[0].Stdout)
		}
		next := probed(t, servedBy+"\n"+check)
		after := runIn(t, sb, next)
		wantStatus(t, after.Steps[0], jobs.StepOK)
		in, got, _ := strings.Cut(after.Steps[0].Stdout, "\n")
		if got != fresh.Stdout || in != box {
			t.Fatalf("after a job that closed a connection first, the next job sees\n%s\nin %s, want, as in a fresh sandbox,\n%s\nin the same sandbox (%s)", got, in, fresh.Stdout, box)
		}
	})
}

// TestReusedSandboxXattrs: extended attributes, access and default ACLs
// and inode flags (no atime, no dump) a job sets on the directories that
// are emptied between jobs are gone for the next job in the sandbox: it
// sees none, and files it makes get no ACL of the last job's.
func TestReusedSandboxXattrs(t *testing.T) {
	modes(t, func(t *testing.T, sb *Sandbox) {
		reusing(t, sb)
		const dirs = "/work /tmp /dev/shm /dev/mqueue /dev"
		const check = "./probe list " + dirs + "\n./probe flags " + dirs + "\ntouch /work/f /tmp/f; stat -c '%n %a' /work/f /tmp/f; ./probe list /work/f /tmp/f"
		fresh := untilReused(t, sb, probed(t, check))
		wantStatus(t, fresh, jobs.StepOK)
		sameBox(t, sb, probed(t, "./probe xattr "+dirs+"\n./probe chattr "+dirs), "chattr /work: ok",
			probed(t, check), fresh.Stdout)
	})
}

// TestReusedSandboxSignalFlood: a job that floods the sandbox's process
// with signals makes it spend no CPU time of note outside the job's own
// cgroup (and so its quota): under a tenth of the job's.
func TestReusedSandboxSignalFlood(t *testing.T) {
	modes(t, func(t *testing.T, sb *Sandbox) {
		reusing(t, sb)
		untilReused(t, sb, types.JobRequest{Steps: []types.JobStep{shStep("true", nil)}})
		sb.pool.mu.Lock()
		pid := sb.pool.ready[0].z.pid
		sb.pool.mu.Unlock()
		before := cpuTicks(t, pid)
		s := runIn(t, sb, types.JobRequest{Steps: []types.JobStep{shStep(`i=0; while [ $i -lt 20000 ]; do
kill -USR1 1; kill -CHLD 1; kill -SEGV 1; kill -TERM 1; i=$((i+1)); done`, nil)}}).Steps[0]
		wantStatus(t, s, jobs.StepOK)
		serve := float64(cpuTicks(t, pid)-before) * 1000 / float64(clockTicks)
		if serve*10 > s.CPUMs {
			t.Fatalf("the sandbox's process spent %.0f ms of CPU time on a job's signals, the job %.0f ms", serve, s.CPUMs)
		}
	})
}

// clockTicks is the unit of the CPU times in /proc/PID/stat (USER_HZ).
const clockTicks = 100

// cpuTicks is the user and system CPU time process pid has used.
func cpuTicks(t *testing.T, pid int) int {
	t.Helper()
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
	if err != nil {
		t.Fatal(err)
	}
	f := strings.Fields(string(b[strings.LastIndexByte(string(b), ')')+1:]))
	u, err1 := strconv.Atoi(f[11])
	s, err2 := strconv.Atoi(f[12])
	if err1 != nil || err2 != nil {
		t.Fatalf("/proc/%d/stat: %q", pid, b)
	}
	return u + s
}

// TestReusedSandboxTenant: a reusable sandbox serves one tenant's jobs,
// also when sandboxes run without user namespaces (every tenant's as the
// same host uid): another tenant's job of the same shape runs elsewhere.
func TestReusedSandboxTenant(t *testing.T) {
	modes(t, func(t *testing.T, sb *Sandbox) {
		reusing(t, sb)
		if sb.UserNS != nil {
			// Tenant b's host ids must reach the sandboxes' files too.
			dir := filepath.Dir(sb.Dir)
			subs, _ := filepath.Glob(filepath.Join(dir, "*"))
			for _, d := range append(subs, dir) {
				if fi, err := os.Stat(d); err == nil && fi.IsDir() {
					os.Chmod(d, fi.Mode().Perm()|0o001)
				}
			}
		}
		a := types.JobRequest{Tenant: "a", Steps: []types.JobStep{shStep(servedBy, nil)}}
		untilReused(t, sb, a)
		boxA := runIn(t, sb, a).Steps[0].Stdout
		for i := 0; i < 3; i++ {
			b := runIn(t, sb, types.JobRequest{Tenant: "b", Steps: []types.JobStep{shStep(servedBy, nil)}}).Steps[0]
			wantStatus(t, b, jobs.StepOK)
			if b.Stdout == boxA {
				t.Fatalf("tenant b's job %d ran in the sandbox tenant a's jobs ran in (%q)", i, boxA)
			}
		}
	})
}

// TestReusedSandboxSchedSlice: a job that sets the time slice the
// sandbox's process's threads ask of the scheduler (sched_setattr's
// runtime, which needs no privilege and is inherited by the next job's
// processes) gets the sandbox dropped: the next job runs in another one,
// with the slice of a fresh one.
func TestReusedSandboxSchedSlice(t *testing.T) {
	modes(t, func(t *testing.T, sb *Sandbox) {
		reusing(t, sb)
		fresh := untilReused(t, sb, probed(t, "./probe getslice"))
		wantStatus(t, fresh, jobs.StepOK)
		dirty := runIn(t, sb, probed(t, servedBy+"\n./probe slice 90000000")).Steps[0]
		if !strings.HasSuffix(dirty.Stdout, "\nslice: ok\n") {
			t.Fatalf("the job setting the slice: %+v", dirty)
		}
		after := runIn(t, sb, probed(t, servedBy+"\n./probe getslice")).Steps[0]
		box, got, _ := strings.Cut(after.Stdout, "\n")
		if got != fresh.Stdout || strings.HasPrefix(dirty.Stdout, box+"\n") {
			t.Fatalf("after a job set the slice the next job got %q in sandbox %q (the job's was %q), want %q in another one", got, box, dirty.Stdout, fresh.Stdout)
		}
	})
}
