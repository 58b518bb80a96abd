package sandbox

import (
	"strings"
	"testing"

	"github.com/shoal-run/shoal/internal/api/types"
	"github.com/shoal-run/shoal/internal/jobs"
)

// procEnv is what a step's process sees of itself that its runtime sets:
// signal mask and ignored signals, capabilities, no_new_privs, seccomp,
// umask, resource limits, OOM score, nice, directory, session and its
// open descriptors.
const procEnv = `grep -E '^(Sig(Blk|Ign)|Cap(Inh|Prm|Eff|Bnd|Amb)|NoNewPrivs|Seccomp|Umask|Cpus_allowed_list):' /proc/$$/status
cat /proc/$$/limits /proc/$$/oom_score_adj; echo "nice $(cut -d' ' -f19 /proc/$$/stat) $(pwd) $(id)"
set -- $(cut -d' ' -f5,6 /proc/$$/stat); [ "$1 $2" = "$$ $$" ] && echo "leads its session"
ls /proc/$$/fd; env | grep -v -e '^PWD=' -e '^SHLVL=' | sort`

// TestReusedSandboxProcessEnv: a step's process in a reused sandbox, the
// first step of a job as its later ones, sees of itself what a step's
// process sees on the ordinary path (a container of its own).
func TestReusedSandboxProcessEnv(t *testing.T) {
	modes(t, func(t *testing.T, sb *Sandbox) {
		req := func() types.JobRequest {
			return types.JobRequest{Env: []string{"A=job", "HOME=/work", "PATH=/nowhere:/bin"}, Steps: []types.JobStep{
				{Args: []string{"sh", "-c", procEnv}, Env: []string{"B=step", "A=step"}},
				{Args: []string{"sh", "-c", procEnv}, Env: []string{"B=step"}},
			}}
		}
		plain := runIn(t, sb, req())
		wantStatus(t, plain.Steps[0], jobs.StepOK)
		if !strings.Contains(plain.Steps[0].Stdout, "Max cpu time") {
			t.Fatalf("the ordinary path: %s", plain.Steps[0].Stdout)
		}
		reusing(t, sb)
		untilReused(t, sb, types.JobRequest{Steps: []types.JobStep{shStep("true", nil)}})
		reused := runIn(t, sb, req())
		for i, s := range reused.Steps {
			wantStatus(t, s, jobs.StepOK)
			if s.Stdout != plain.Steps[i].Stdout {
				t.Fatalf("step %d in a reused sandbox sees\n%s\nwant, as on the ordinary path,\n%s", i, s.Stdout, plain.Steps[i].Stdout)
			}
		}
	})
}

// TestReusedSandboxReapsOrphans: the processes a step leaves to end on
// their own become children of the step's process, as of its pid 1 on
// the ordinary path, which reaps them as they end (a shell does): they do
// not count against the step's pids limit while it runs. (A step whose
// process does not reap its children keeps their zombies, as on the
// ordinary path: TestReusedSandboxLimits' fork bomb.)
func TestReusedSandboxReapsOrphans(t *testing.T) {
	modes(t, func(t *testing.T, sb *Sandbox) {
		// Each (sleep 0 &) leaves an orphan that ends at once: 64 of them
		// under a limit of 16 pids, then the zombies still there.
		req := func() types.JobRequest {
			return types.JobRequest{Steps: []types.JobStep{shStep(`i=0; while [ $i -lt 64 ]; do (sleep 0 &) || exit 1; i=$((i+1)); done
sleep 0.2; ps -o stat | grep -c Z`, &types.JobLimits{Pids: 16})}}
		}
		for _, reuse := range []bool{false, true} {
			if reuse {
				reusing(t, sb)
				untilReused(t, sb, types.JobRequest{Steps: []types.JobStep{shStep("true", nil)}})
			}
			s := runIn(t, sb, req()).Steps[0]
			if s.Status != jobs.StepNonzeroExit || s.Stdout != "0\n" {
				t.Fatalf("a step leaving orphans that end (reused sandbox %v; want no zombie, grep's exit 1): %+v", reuse, s)
			}
		}
	})
}

// TestReusedSandboxLaterStepTampered: a step that changes what the
// sandbox's process hands down (its nice value) and fills /tmp leaves the
// job's next step neither: that step takes the ordinary path (a sandbox
// of its own) with a fresh /tmp and the files of /work, and the sandbox is
// not reused.
func TestReusedSandboxLaterStepTampered(t *testing.T) {
	modes(t, func(t *testing.T, sb *Sandbox) {
		reusing(t, sb)
		reused := untilReused(t, sb, types.JobRequest{Steps: []types.JobStep{shStep(servedBy, nil)}}).Stdout
		const see = `; echo "nice $(cut -d' ' -f19 /proc/self/stat) $(ls /tmp | wc -l) $(cat /work/out)"; head -c 1m /dev/zero > /tmp/f && echo wrote`
		// A wall time far above the default 10 s: filling /tmp took more
		// than that on a host loaded many times over.
		j := runIn(t, sb, types.JobRequest{Limits: types.JobLimits{Timeout: "2m"}, Steps: []types.JobStep{
			shStep(servedBy+"; echo built > /work/out; head -c 64m /dev/zero > /tmp/fill; renice -n 10 -p 1 >/dev/null && echo reniced", nil),
			shStep(servedBy+see, nil),
		}})
		// head's error: /tmp is full.
		box, first, _ := strings.Cut(j.Steps[0].Stdout, "\n")
		if box+"\n" != reused || first != "reniced\n" || !strings.HasPrefix(j.Steps[0].Stderr, "head: ") {
			t.Fatalf("the step filling /tmp and changing its sandbox's process, want it in the reused sandbox %q: %+v", reused, j.Steps[0])
		}
		wantStatus(t, j.Steps[1], jobs.StepOK)
		in, got, _ := strings.Cut(j.Steps[1].Stdout, "\n")
		if in == box || got != "nice 0 0 built\nwrote\n" {
			t.Fatalf("the next step, in %s after a step in %s: %q, want nice 0, an empty /tmp and /work's file in another sandbox", in, box, got)
		}
		next := runIn(t, sb, types.JobRequest{Steps: []types.JobStep{shStep(servedBy, nil)}}).Steps[0]
		if next.Stdout == box+"\n" {
			t.Fatalf("the next job ran in the sandbox a step changed (%s)", box)
		}
	})
}
